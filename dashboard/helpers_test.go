package dashboard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/skiplocktest"
)

// fixture is a schema seeded with a job in every state, a paused queue, a schedule
// and an outbox event in each state.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	client *skiplock.Client
	ob     *outbox.Outbox
	jobs   map[skiplock.JobState]string // a job id in each state
	events map[outbox.State]string      // an event id in each state
	txid   int64                        // the transaction that enqueued the pending job
}

const secret = "s3cr3t-payload-value"

type publisher struct{ err error }

func (p publisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = p.err
	}
	return errs
}
func (publisher) Close() error { return nil }

func seed(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	c := skiplocktest.NewClient(t, skiplock.Config{})
	ob, err := outbox.New(c, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, client: c, ob: ob, jobs: map[skiplock.JobState]string{}, events: map[outbox.State]string{}}
	enqueue := func(queue, kind, payload string, tags ...string) string {
		t.Helper()
		res, err := c.EnqueueRaw(ctx, kind, []byte(payload), &skiplock.EnqueueOpts{Queue: queue,
			Metadata: map[string]string{"tenant": "acme"}, Tags: tags})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	claim := func(queue string) *skiplock.Job {
		t.Helper()
		jobs, err := c.Manual().Claim(ctx, queue, 1)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v, %d jobs", err, len(jobs))
		}
		return jobs[0]
	}
	f.jobs[skiplock.StateSucceeded] = enqueue("mail", "send_email", `{"to":"ana@example.com"}`, "vip", "eu")
	done := claim("mail")
	must(t, done.SetOutput(map[string]string{"message_id": "m-4711"}))
	must(t, c.Manual().Complete(ctx, done))
	f.jobs[skiplock.StateFailed] = enqueue("mail", "send_email", `{"to":"bob@example.com"}`, "eu")
	must(t, c.Manual().Fail(ctx, claim("mail"), errors.New("smtp: mailbox unavailable")))
	f.jobs[skiplock.StateRunning] = enqueue("mail", "send_email", `{"to":"cy@example.com"}`)
	claim("mail")
	// A claimed job: leased by a worker that has not started its handler (a manual
	// claim starts every job it takes, so the row is set as a worker's prefetch
	// leaves it).
	f.jobs[skiplock.StateClaimed] = enqueue("mail", "send_email", `{"to":"eve@example.com"}`)
	claim("mail")
	_, err = c.Pool().Exec(ctx, "UPDATE "+pgx.Identifier{c.Schema(), "jobs"}.Sanitize()+" SET started = false WHERE id = $1", f.jobs[skiplock.StateClaimed])
	must(t, err)
	f.jobs[skiplock.StateCancelled] = enqueue("reports", "build_report", `{"month":"2026-01"}`)
	_, err = c.JobCancel(ctx, f.jobs[skiplock.StateCancelled], "not needed")
	must(t, err)
	f.jobs[skiplock.StatePending] = enqueue("mail", "send_email", `{"to":"dee@example.com","token":"`+secret+`"}`)
	enqueue("paused", "build_report", `{"month":"2026-02"}`)
	// A waiting job: the callback of a batch that has not completed (docs/flows.md).
	batch, err := c.BatchOpen(ctx, skiplock.Batch{OnComplete: &skiplock.EnqueueParams{Kind: "import_done", Payload: []byte(`{}`),
		Opts: skiplock.EnqueueOpts{Queue: "mail"}}})
	must(t, err)
	b, err := c.BatchGet(ctx, batch)
	must(t, err)
	f.jobs[skiplock.StateWaiting] = b.OnComplete
	must(t, c.QueuePause(ctx, "paused"))
	must(t, c.QueuePauseAhead(ctx, "idle")) // paused, and no jobs
	_, err = c.ScheduleAdd(ctx, skiplock.PeriodicJob{Name: "nightly", Spec: "@daily", Kind: "build_report",
		Payload: []byte(`{"month":"current","key":"` + secret + `"}`), Queue: "reports"})
	must(t, err)

	write := func(typ string) string {
		t.Helper()
		id, err := ob.Write(ctx, c.Pool(), outbox.Event{AggregateType: "order", AggregateID: "42", EventType: typ,
			Payload: []byte(`{"order":42,"card":"` + secret + `"}`), Headers: map[string]string{"x-secret": secret}, MaxAttempts: 1})
		must(t, err)
		return id
	}
	relay := func(err error) {
		t.Helper()
		r, rerr := ob.NewRelay(publisher{err: err}, outbox.RelayConfig{})
		must(t, rerr)
		_, _, rerr = r.RunOnce(ctx)
		must(t, rerr)
	}
	f.events[outbox.StatePublished] = write("order.created")
	relay(nil)
	f.events[outbox.StateDead] = write("order.paid")
	relay(skiplock.Permanent(errors.New("broker said no")))
	f.events[outbox.StatePending] = write("order.shipped")
	j, err := c.JobGet(ctx, f.jobs[skiplock.StatePending])
	must(t, err)
	f.txid = j.TxID
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// handler builds a dashboard on the fixture's client and outbox.
func (f *fixture) handler(opts dashboard.Options) http.Handler {
	f.t.Helper()
	h, err := dashboard.New(f.client, f.ob, opts)
	must(f.t, err)
	return h
}

func allowAll(*http.Request, string) bool { return true }

// browser is an HTTP client with a cookie jar that does not follow redirects, on a
// test server serving the dashboard under base.
type browser struct {
	t    *testing.T
	srv  *httptest.Server
	c    *http.Client
	base string
}

// serve serves h at the server's root (base "") or mounted under base with
// http.StripPrefix (strip) or as it is (for Options.BasePath).
func serve(t *testing.T, h http.Handler, base string, strip bool) *browser {
	t.Helper()
	var root http.Handler = h
	if base != "" {
		mux := http.NewServeMux()
		if strip {
			mux.Handle(base+"/", http.StripPrefix(base, h))
		} else {
			mux.Handle(base+"/", h)
		}
		root = mux
	}
	srv := httptest.NewServer(root)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{t: t, srv: srv, c: c, base: base}
}

type response struct {
	code   int
	body   string
	header http.Header
}

func (b *browser) do(req *http.Request) response {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return response{code: res.StatusCode, body: string(body), header: res.Header}
}

// get fetches a path below the dashboard's base.
func (b *browser) get(path string, hdr ...string) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+b.base+path, nil)
	must(b.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.do(req)
}

// post submits a form to a path below the dashboard's base.
func (b *browser) post(path string, form url.Values, hdr ...string) response {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+b.base+path, strings.NewReader(form.Encode()))
	must(b.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf-token" content="([0-9a-f]+)"`)

// csrf returns the token of the browser's session, read from a page's form
// (opening the session if it has none).
func (b *browser) csrf() string {
	b.t.Helper()
	r := b.get("/")
	m := csrfField.FindStringSubmatch(r.body)
	if m == nil {
		b.t.Fatalf("no csrf token on the overview (status %d)", r.code)
	}
	return m[1]
}

// act posts form to path with the session's CSRF token.
func (b *browser) act(path string, form url.Values) response {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.csrf())
	return b.post(path, form)
}

// testids counts the elements with data-testid="id" in body.
func testids(body, id string) int { return strings.Count(body, `data-testid="`+id+`"`) }

func wantStatus(t *testing.T, what string, r response, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: status %d, want %d\n%s", what, r.code, code, r.body)
	}
}

// rolePool returns a pool on the test server whose sessions run as a role with
// only the dashboard grants of docs/roles.md on schema.
func dashboardRolePool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	return rolePool(t, schema, "_dash", func(role string) skiplock.RoleNames { return skiplock.RoleNames{Dashboard: role} })
}

// writerRolePool is dashboardRolePool for the dashboard's write variant: a role
// with the dashboard's and the worker's grants (docs/dashboard.md).
func writerRolePool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	return rolePool(t, schema, "_dashw", func(role string) skiplock.RoleNames {
		return skiplock.RoleNames{Dashboard: role, Worker: role}
	})
}

func rolePool(t *testing.T, schema, suffix string, names func(role string) skiplock.RoleNames) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin := skiplocktest.Pool(t)
	role := schema + suffix
	_, err := admin.Exec(ctx, `CREATE ROLE "`+role+`" NOLOGIN`)
	must(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), `DROP OWNED BY "`+role+`"; DROP ROLE "`+role+`"`) })
	ddl, err := skiplock.RolesSQL(schema, names(role))
	must(t, err)
	_, err = admin.Exec(ctx, ddl)
	must(t, err)
	cfg, err := pgxpool.ParseConfig(skiplocktest.URL(t))
	must(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["role"] = role
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	must(t, err)
	t.Cleanup(p.Close)
	return p
}
