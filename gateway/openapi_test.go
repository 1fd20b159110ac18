package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/skiplocktest"
)

type openapiDocument struct {
	OpenAPI    string                               `json:"openapi"`
	Paths      map[string]map[string]openapiOp      `json:"paths"`
	Webhooks   map[string]map[string]openapiOp      `json:"webhooks"`
	Components struct{ Schemas map[string]*schema } `json:"components"`
}

type openapiOp struct {
	RequestBody *struct {
		Content map[string]struct{ Schema *schema } `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct{ Schema *schema } `json:"content"`
	} `json:"responses"`
}

type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Enum                 []string           `json:"enum"`
	Items                *schema            `json:"items"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties any                `json:"additionalProperties"`
}

func readDocument(t *testing.T) openapiDocument {
	t.Helper()
	var doc openapiDocument
	dec := json.NewDecoder(strings.NewReader(string(openapiDoc)))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi.json is OpenAPI %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

func ref(t reflect.Type) string { return "#/components/schemas/" + t.Name() }

// The document lists exactly the routes the handler serves, each with the request
// and response types of the route table.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc := readDocument(t)
	want := map[string]bool{"GET " + OpenAPIPath: true}
	for _, rt := range routeTable {
		key := rt.method + " " + rt.path
		want[key] = true
		op, ok := doc.Paths[rt.path][strings.ToLower(rt.method)]
		if !ok {
			t.Errorf("route %s is not in openapi.json", key)
			continue
		}
		if op.RequestBody == nil || op.RequestBody.Content["application/json"].Schema == nil || op.RequestBody.Content["application/json"].Schema.Ref != ref(rt.req) {
			t.Errorf("%s: the document's request body is not %s", key, ref(rt.req))
		}
		if s := op.Responses["200"].Content["application/json"].Schema; s == nil || s.Ref != ref(rt.resp) {
			t.Errorf("%s: the document's 200 answer is not %s", key, ref(rt.resp))
		}
		for _, status := range []string{"400", "401", "403", "413", "415", "503"} {
			if s := op.Responses[status].Content["application/json"].Schema; s == nil || s.Ref != ref(reflect.TypeFor[ErrorResponse]()) {
				t.Errorf("%s: the document's %s answer is not an ErrorResponse", key, status)
			}
		}
		if _, lease := op.Responses["409"]; lease != strings.HasPrefix(rt.path, "/v1/jobs/") {
			t.Errorf("%s: a 409 lease_lost answer documented: %v, want %v", key, lease, !lease)
		}
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if key := strings.ToUpper(method) + " " + path; !want[key] {
				t.Errorf("openapi.json documents %s, which the gateway does not serve", key)
			}
		}
	}
	if op := doc.Webhooks["job"]["post"]; op.RequestBody == nil || op.RequestBody.Content["application/json"].Schema.Ref != ref(reflect.TypeFor[PushRequest]()) ||
		op.Responses["200"].Content["application/json"].Schema.Ref != ref(reflect.TypeFor[PushReply]()) {
		t.Errorf("the push webhook is not documented with PushRequest and PushReply")
	}

	// And the handler itself: each documented route answers (503: not started), any
	// other path 404.
	c := skiplocktest.NewClient(t, skiplock.Config{})
	g, err := New(c, Options{Unauthenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	for key := range want {
		method, path, _ := strings.Cut(key, " ")
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, httptest.NewRequest(method, strings.ReplaceAll(path, "{id}", "x"), strings.NewReader("{}")))
		if rec.Code == http.StatusNotFound || rec.Code == http.StatusMethodNotAllowed {
			t.Errorf("%s: the handler answers %d", key, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/jobs/x/explode", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("an undocumented route answers %d", rec.Code)
	}
}

// Every schema of the document is a Go type of api.go with the same fields, types
// and required list (the fields without omitempty).
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc := readDocument(t)
	types := []reflect.Type{
		reflect.TypeFor[ClaimRequest](), reflect.TypeFor[ClaimResponse](), reflect.TypeFor[ClaimedJob](),
		reflect.TypeFor[LeaseRequest](), reflect.TypeFor[HeartbeatResponse](), reflect.TypeFor[JobLease](),
		reflect.TypeFor[HeartbeatManyRequest](), reflect.TypeFor[HeartbeatManyResponse](),
		reflect.TypeFor[CompleteRequest](), reflect.TypeFor[CompleteManyRequest](), reflect.TypeFor[JobCompletion](),
		reflect.TypeFor[CompleteManyResponse](), reflect.TypeFor[FailRequest](), reflect.TypeFor[SnoozeRequest](),
		reflect.TypeFor[CancelRequest](), reflect.TypeFor[FinishResponse](), reflect.TypeFor[ErrorResponse](),
		reflect.TypeFor[ErrorBody](), reflect.TypeFor[PushRequest](), reflect.TypeFor[PushReply](),
	}
	var names []string
	for _, typ := range types {
		names = append(names, typ.Name())
		s := doc.Components.Schemas[typ.Name()]
		if s == nil {
			t.Errorf("openapi.json has no schema %s", typ.Name())
			continue
		}
		if s.Type != "object" || s.AdditionalProperties != false {
			t.Errorf("schema %s: want an object without additional properties", typ.Name())
		}
		var required []string
		fields := map[string]bool{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields[name] = true
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
			p := s.Properties[name]
			if p == nil {
				t.Errorf("schema %s lacks property %s (%s.%s)", typ.Name(), name, typ.Name(), f.Name)
				continue
			}
			if want := schemaOf(f.Type); !sameShape(p, want) {
				t.Errorf("schema %s, property %s: type %s/%s %s, want %s/%s %s", typ.Name(), name, p.Type, p.Format, p.Ref, want.Type, want.Format, want.Ref)
			}
		}
		for name := range s.Properties {
			if !fields[name] {
				t.Errorf("schema %s has property %s, which %s lacks", typ.Name(), name, typ.Name())
			}
		}
		slices.Sort(required)
		got := slices.Sorted(slices.Values(s.Required))
		if !slices.Equal(got, required) {
			t.Errorf("schema %s requires %v, want %v (the fields without omitempty)", typ.Name(), got, required)
		}
	}
	for name := range doc.Components.Schemas {
		if !slices.Contains(names, name) {
			t.Errorf("openapi.json's schema %s is no type of api.go", name)
		}
	}
	codes := []string{CodeInvalidRequest, CodeUnauthenticated, CodeForbidden, CodeNotFound, CodeMethodNotAllowed,
		CodeLeaseLost, CodeBodyTooLarge, CodeUnsupportedType, CodeUnavailable, CodeInternal}
	if got := doc.Components.Schemas["ErrorBody"].Properties["code"].Enum; !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(codes))) {
		t.Errorf("ErrorBody.code's enum %v, want the Code constants %v", got, codes)
	}
}

// schemaOf is the schema a Go field type is documented with.
func schemaOf(t reflect.Type) *schema {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return &schema{Type: "string", Format: "date-time"}
	case t == reflect.TypeFor[json.RawMessage]():
		return &schema{} // any JSON
	case t.Kind() == reflect.Struct:
		return &schema{Ref: ref(t)}
	case t.Kind() == reflect.Slice:
		return &schema{Type: "array", Items: schemaOf(t.Elem())}
	case t.Kind() == reflect.Map:
		return &schema{Type: "object"}
	case t.Kind() == reflect.String:
		return &schema{Type: "string"}
	case t.Kind() == reflect.Bool:
		return &schema{Type: "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return &schema{Type: "integer"}
	}
	return &schema{Type: "unknown " + t.String()}
}

// sameShape compares a documented schema with the one a Go type calls for: the
// same type and reference, date-times marked, arrays of the same items.
func sameShape(got, want *schema) bool {
	if got.Type != want.Type || got.Ref != want.Ref || (want.Format == "date-time") != (got.Format == "date-time") {
		return false
	}
	if want.Items != nil {
		return got.Items != nil && sameShape(got.Items, want.Items)
	}
	return true
}
