package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
)

// route is one route of the gateway: the table the mux is built from and the
// OpenAPI test reads.
type route struct {
	method, path string
	op           Op
	req, resp    reflect.Type // the JSON bodies (nil: none)
	handle       func(g *Gateway, w http.ResponseWriter, r *http.Request, worker string)
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

var routeTable = []route{
	{"POST", "/v1/claim", OpClaim, typeOf[ClaimRequest](), typeOf[ClaimResponse](), (*Gateway).claim},
	{"POST", "/v1/heartbeat", OpHeartbeat, typeOf[HeartbeatManyRequest](), typeOf[HeartbeatManyResponse](), (*Gateway).heartbeatMany},
	{"POST", "/v1/jobs/{id}/heartbeat", OpHeartbeat, typeOf[LeaseRequest](), typeOf[HeartbeatResponse](), (*Gateway).heartbeat},
	{"POST", "/v1/complete", OpComplete, typeOf[CompleteManyRequest](), typeOf[CompleteManyResponse](), (*Gateway).completeMany},
	{"POST", "/v1/jobs/{id}/complete", OpComplete, typeOf[CompleteRequest](), typeOf[FinishResponse](), (*Gateway).complete},
	{"POST", "/v1/jobs/{id}/fail", OpFail, typeOf[FailRequest](), typeOf[FinishResponse](), (*Gateway).fail},
	{"POST", "/v1/jobs/{id}/snooze", OpSnooze, typeOf[SnoozeRequest](), typeOf[FinishResponse](), (*Gateway).snooze},
	{"POST", "/v1/jobs/{id}/cancel", OpCancel, typeOf[CancelRequest](), typeOf[FinishResponse](), (*Gateway).cancel},
}

//go:embed openapi.json
var openapiDoc []byte

func (g *Gateway) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routeTable {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			req := Request{Op: rt.op, JobID: r.PathValue("id")}
			if rt.op == OpClaim {
				// The claim's queue is in its body: authentication first, the queue's
				// permission once the body is read (claim).
				req.Queue = claimQueuePending
			}
			worker, ok := g.authenticate(w, r, req)
			if !ok {
				return
			}
			if g.current() == nil {
				writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the gateway is not started (or stopping): retry", "")
				return
			}
			rt.handle(g, w, r, worker)
		})
	}
	mux.HandleFunc("GET "+OpenAPIPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapiDoc)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		for _, rt := range routeTable {
			if matches(rt.path, r.URL.Path) {
				w.Header().Set("Allow", rt.method)
				writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed here: use "+rt.method, "")
				return
			}
		}
		writeError(w, http.StatusNotFound, CodeNotFound, "no route "+r.URL.Path+" (the routes are in "+OpenAPIPath+")", "")
	})
	return mux
}

// matches reports whether path fits pattern, whose {x} segments match any one segment.
func matches(pattern, path string) bool {
	ps, xs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return false
	}
	for i := range ps {
		if ps[i] != xs[i] && !(strings.HasPrefix(ps[i], "{") && xs[i] != "") {
			return false
		}
	}
	return true
}

// claimQueuePending marks a claim whose queue is not read yet: Authorize is asked
// once the body is (claim).
const claimQueuePending = "\x00"

// authenticate checks the request's credentials. A claim's queue is checked later
// (allowQueue), once its body is read. It writes the refusal itself.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request, req Request) (worker string, ok bool) {
	if g.opts.Unauthenticated {
		return "", true
	}
	if t := g.token(r); t != nil {
		return t.Worker, true
	}
	if g.opts.Authorize == nil {
		writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "give a worker's token as Authorization: Bearer <token>", "")
		return "", false
	}
	if req.Queue == claimQueuePending {
		return "", true // Authorize decides with the queue (allowQueue)
	}
	return g.authorize(w, r, req)
}

func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request, req Request) (string, bool) {
	worker, err := g.opts.Authorize(r, req)
	switch {
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="skiplock"`)
		writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "not authenticated", "")
		return "", false
	case err != nil:
		writeError(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("%s is not allowed", req.Op), "")
		return "", false
	}
	return worker, true
}

// allowQueue checks a claim's queue against the request's token, or asks Authorize.
func (g *Gateway) allowQueue(w http.ResponseWriter, r *http.Request, queue string) (string, bool) {
	if g.opts.Unauthenticated {
		return "", true
	}
	if t := g.token(r); t != nil {
		if len(t.Queues) > 0 && !slices.Contains(t.Queues, queue) {
			writeError(w, http.StatusForbidden, CodeForbidden, fmt.Sprintf("worker %s may not claim from queue %q", t.Worker, queue), "queue")
			return "", false
		}
		return t.Worker, true
	}
	return g.authorize(w, r, Request{Op: OpClaim, Queue: queue})
}

// token returns the Options.Tokens entry the request's bearer token names, or nil.
// Tokens are looked up by their SHA-256, so the lookup's timing says nothing of them.
func (g *Gateway) token(r *http.Request) *Token {
	if len(g.tokens) == 0 {
		return nil
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	return g.tokens[sha256.Sum256([]byte(strings.TrimSpace(tok)))]
}

// decode reads the request's JSON body into v, strictly: unknown fields, trailing
// data, a wrong type or a body over MaxBodyBytes are refused with their 4xx.
func (g *Gateway) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			writeError(w, http.StatusUnsupportedMediaType, CodeUnsupportedType, fmt.Sprintf("Content-Type %q: send application/json", ct), "")
			return false
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("the body exceeds %d bytes", g.opts.MaxBodyBytes), "")
			return false
		}
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "reading the body: "+err.Error(), "")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeDecodeError(w, err)
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "the body holds more than one JSON value", "")
		return false
	}
	return true
}

func writeDecodeError(w http.ResponseWriter, err error) {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("%s: want a %s, got a JSON %s", typeErr.Field, typeErr.Type, typeErr.Value), typeErr.Field)
	case errors.As(err, &syntaxErr):
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("not JSON: %v (at byte %d)", err, syntaxErr.Offset), "")
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "empty body: send a JSON object", "")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("unknown field %q", field), field)
	default:
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "not a JSON object of this route: "+err.Error(), "")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg, field string) {
	writeJSON(w, status, ErrorResponse{Error: ErrorBody{Code: code, Message: msg, Field: field}})
}

// writeFailure answers an error of the library: ErrInvalid 400 (naming the field),
// ErrLeaseLost 409, an unreachable database 503, anything else 500 (logged).
func (g *Gateway) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	var ve *skiplock.ValidationError
	switch {
	case r.Context().Err() != nil:
		// The client left (a worker stopped during a long poll): nobody reads an
		// answer, and whatever failed failed because of it.
		g.log.Debug("gateway: request ended by its client", "path", r.URL.Path, "error", err)
		return
	case errors.As(err, &ve):
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, ve.Reason, ve.Field)
	case errors.Is(err, skiplock.ErrLeaseLost):
		writeError(w, http.StatusConflict, CodeLeaseLost, "the job is not running under this lease token (it finished, was reclaimed after its lease expired, or was cancelled): nothing was written; drop the job", "lease_token")
	case errors.Is(err, errStopped):
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the gateway is stopping: retry", "")
	case transient(err):
		g.log.Warn("gateway: database unavailable", "path", r.URL.Path, "error", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the database did not answer: retry", "")
	default:
		g.log.Error("gateway: request failed", "path", r.URL.Path, "error", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "internal error (logged by the gateway)", "")
	}
}

// transient reports whether err is one a retry may fix: a connection that failed or
// timed out, a statement that may be retried.
func transient(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

var errStopped = errors.New("gateway: stopped")

// ms converts milliseconds from a request into a duration, refusing negatives and
// values beyond max with the field named.
func ms(w http.ResponseWriter, field string, v int64, max time.Duration) (time.Duration, bool) {
	if v < 0 || v > max.Milliseconds() {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("%s: %d is outside 0 to %d", field, v, max.Milliseconds()), field)
		return 0, false
	}
	return time.Duration(v) * time.Millisecond, true
}

func (g *Gateway) claim(w http.ResponseWriter, r *http.Request, _ string) {
	var req ClaimRequest
	if !g.decode(w, r, &req) {
		return
	}
	switch err := ident.ValidateQueue(req.Queue); {
	case req.Queue == "":
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "queue is required", "queue")
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), "queue")
		return
	case req.Limit < 0 || req.Limit > g.opts.MaxClaim:
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("limit: %d is outside 1 to %d (the gateway's MaxClaim)", req.Limit, g.opts.MaxClaim), "limit")
		return
	}
	wait, ok := ms(w, "wait_ms", req.WaitMS, g.opts.MaxWait)
	if !ok {
		return
	}
	worker, ok := g.allowQueue(w, r, req.Queue)
	if !ok {
		return
	}
	jobs, err := g.claimJobs(r.Context(), req.Queue, max(req.Limit, 1), wait)
	if err != nil {
		g.writeFailure(w, r, err)
		return
	}
	resp := ClaimResponse{Jobs: make([]ClaimedJob, len(jobs)), LeaseMS: g.lease.Milliseconds(), HeartbeatMS: (g.lease / 3).Milliseconds()}
	for i, j := range jobs {
		resp.Jobs[i] = claimedJob(j)
	}
	if len(jobs) > 0 {
		g.log.Debug("gateway: claimed", "worker", worker, "queue", req.Queue, "jobs", len(jobs))
	}
	writeJSON(w, http.StatusOK, resp)
}
