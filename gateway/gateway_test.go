package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/skiplocktest"
)

const (
	workerToken = "worker-token-0123456789"
	otherToken  = "billing-token-0123456789"
)

// env is a gateway on a fresh schema, served by an httptest server.
type env struct {
	t      *testing.T
	client *skiplock.Client
	gw     *gateway.Gateway
	srv    *httptest.Server
}

func newEnv(t *testing.T, cfg skiplock.Config, opts gateway.Options) *env {
	t.Helper()
	if len(opts.Tokens) == 0 && opts.Authorize == nil && !opts.Unauthenticated {
		opts.Tokens = []gateway.Token{
			{Worker: "any", Token: workerToken},
			{Worker: "billing", Token: otherToken, Queues: []string{"billing"}},
		}
	}
	c := skiplocktest.NewClient(t, cfg)
	return startEnv(t, c, opts)
}

func startEnv(t *testing.T, c *skiplock.Client, opts gateway.Options) *env {
	t.Helper()
	g, err := gateway.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := g.Stop(ctx); err != nil {
			t.Errorf("stopping the gateway: %v", err)
		}
	})
	return &env{t: t, client: c, gw: g, srv: srv}
}

// call sends body (a value to encode, a string sent as it is, or nil) and returns the
// status and the raw answer.
func (e *env) call(method, path, token string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// post calls a route with the worker's token and decodes a 200 answer into out; any
// other status fails the test.
func (e *env) post(path string, body, out any) {
	e.t.Helper()
	status, raw := e.call("POST", path, workerToken, body)
	if status != http.StatusOK {
		e.t.Fatalf("POST %s: %d %s", path, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("POST %s: decoding %s: %v", path, raw, err)
		}
	}
}

// refused calls a route and checks the status and the error code of its answer.
func (e *env) refused(method, path, token string, body any, status int, code, field string) gateway.ErrorBody {
	e.t.Helper()
	got, raw := e.call(method, path, token, body)
	var er gateway.ErrorResponse
	if err := json.Unmarshal(raw, &er); err != nil {
		e.t.Fatalf("%s %s: answer %q is not an ErrorResponse: %v", method, path, raw, err)
	}
	if got != status || er.Error.Code != code || er.Error.Field != field {
		e.t.Fatalf("%s %s: got %d %+v, want %d code %s field %q", method, path, got, er.Error, status, code, field)
	}
	return er.Error
}

func (e *env) enqueue(queue, kind, payload string, opts *skiplock.EnqueueOpts) string {
	e.t.Helper()
	if opts == nil {
		opts = &skiplock.EnqueueOpts{}
	}
	opts.Queue = queue
	res, err := e.client.EnqueueRaw(context.Background(), kind, []byte(payload), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.ID
}

func (e *env) claimOne(queue string) gateway.ClaimedJob {
	e.t.Helper()
	var cr gateway.ClaimResponse
	e.post("/v1/claim", gateway.ClaimRequest{Queue: queue}, &cr)
	if len(cr.Jobs) != 1 {
		e.t.Fatalf("claimed %d jobs, want 1", len(cr.Jobs))
	}
	return cr.Jobs[0]
}

func (e *env) job(id string) *skiplock.Job {
	e.t.Helper()
	j, err := e.client.JobGet(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func TestClaimAndFinish(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{}, gateway.Options{})

	// Nothing due: an immediate claim answers with no jobs.
	var empty gateway.ClaimResponse
	e.post("/v1/claim", gateway.ClaimRequest{Queue: "default"}, &empty)
	if len(empty.Jobs) != 0 || empty.LeaseMS != 30000 || empty.HeartbeatMS != 10000 {
		t.Fatalf("empty claim: %+v", empty)
	}

	id := e.enqueue("default", "email", `{"to":"ana@example.com"}`, &skiplock.EnqueueOpts{Metadata: map[string]string{"tenant": "acme"}, Tags: []string{"t1"}})
	j := e.claimOne("default")
	var args struct{ To string }
	if err := json.Unmarshal(j.Args, &args); err != nil || args.To != "ana@example.com" {
		t.Fatalf("args %s", j.Args)
	}
	if j.ID != id || j.Kind != "email" || j.Attempt != 1 ||
		j.Metadata["tenant"] != "acme" || j.Tags[0] != "t1" || j.IdempotencyKey != "skiplock-job-"+id || j.LeaseToken == "" {
		t.Fatalf("claimed %+v", j)
	}
	var hb gateway.HeartbeatResponse
	e.post("/v1/jobs/"+id+"/heartbeat", gateway.LeaseRequest{LeaseToken: j.LeaseToken}, &hb)
	if hb.ID != id || hb.LeaseMS != 30000 {
		t.Fatalf("heartbeat: %+v", hb)
	}
	var fr gateway.FinishResponse
	e.post("/v1/jobs/"+id+"/complete", gateway.CompleteRequest{LeaseToken: j.LeaseToken, Output: json.RawMessage(`{"sent":true}`)}, &fr)
	if fr.State != skiplock.StateSucceeded {
		t.Fatalf("complete: %+v", fr)
	}
	if got := e.job(id); got.State != skiplock.StateSucceeded || string(got.Output) != `{"sent": true}` {
		t.Fatalf("job after complete: %s %s", got.State, got.Output)
	}
	// Completing again is stale: the claim is over.
	e.refused("POST", "/v1/jobs/"+id+"/complete", workerToken, gateway.CompleteRequest{LeaseToken: j.LeaseToken}, 409, gateway.CodeLeaseLost, "lease_token")
	e.refused("POST", "/v1/jobs/"+id+"/heartbeat", workerToken, gateway.LeaseRequest{LeaseToken: j.LeaseToken}, 409, gateway.CodeLeaseLost, "lease_token")
}

// POST /v1/complete succeeds many jobs in one request, each fenced by its own lease
// token: a stale one is answered lost and changes nothing, the others are written.
func TestCompleteMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{}, gateway.Options{})
	a := e.enqueue("default", "k", `{}`, nil)
	b := e.enqueue("default", "k", `{}`, nil)
	c := e.enqueue("default", "k", `{}`, nil)
	var cr gateway.ClaimResponse
	e.post("/v1/claim", gateway.ClaimRequest{Queue: "default", Limit: 3}, &cr)
	if len(cr.Jobs) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(cr.Jobs))
	}
	tokens := map[string]string{}
	for _, j := range cr.Jobs {
		tokens[j.ID] = j.LeaseToken
	}
	// c's call carries a token that is not its claim's.
	const stale = "018f0000-0000-7000-8000-000000000001"
	req := gateway.CompleteManyRequest{Jobs: []gateway.JobCompletion{
		{ID: a, LeaseToken: tokens[a], Output: json.RawMessage(`{"n":1}`)},
		{ID: b, LeaseToken: tokens[b]},
		{ID: c, LeaseToken: stale},
	}}
	var res gateway.CompleteManyResponse
	e.post("/v1/complete", req, &res)
	if !slices.Equal(res.Succeeded, []string{a, b}) || !slices.Equal(res.Lost, []string{c}) {
		t.Fatalf("complete many: %+v (a %s, b %s, c %s)", res, a, b, c)
	}
	if got := e.job(a); got.State != skiplock.StateSucceeded || string(got.Output) != `{"n": 1}` {
		t.Fatalf("a: %s %s", got.State, got.Output)
	}
	if got := e.job(b); got.State != skiplock.StateSucceeded || got.Output != nil {
		t.Fatalf("b: %s %s", got.State, got.Output)
	}
	if got := e.job(c); got.State != skiplock.StateRunning || got.LeaseToken != tokens[c] {
		t.Fatalf("c was changed by a call under another token: %+v", got)
	}
	// Again: every one is stale now but c's, under its own token.
	req.Jobs[2].LeaseToken = tokens[c]
	e.post("/v1/complete", req, &res)
	if len(res.Succeeded) != 1 || res.Succeeded[0] != c || !slices.Equal(res.Lost, []string{a, b}) {
		t.Fatalf("complete many again: %+v", res)
	}
	if got := e.job(a); string(got.Output) != `{"n": 1}` {
		t.Fatalf("a's output changed by a stale call: %s", got.Output)
	}
}

func TestFailSnoozeCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{RetryPolicy: fixedRetry(time.Hour)}, gateway.Options{})
	ctx := context.Background()

	// A retry by the policy: pending an hour later, the error recorded.
	id := e.enqueue("default", "k", `{}`, &skiplock.EnqueueOpts{MaxAttempts: 3})
	j := e.claimOne("default")
	var fr gateway.FinishResponse
	e.post("/v1/jobs/"+id+"/fail", gateway.FailRequest{LeaseToken: j.LeaseToken, Error: "smtp down"}, &fr)
	got := e.job(id)
	if fr.State != skiplock.StatePending || got.LastError != "smtp down" || got.RunAt.Sub(got.UpdatedAt) < 59*time.Minute {
		t.Fatalf("retry by policy: %+v; job %s run_at %s updated %s error %q", fr, got.State, got.RunAt, got.UpdatedAt, got.LastError)
	}

	// An explicit retry delay, then a permanent failure.
	if _, err := e.client.JobRunNow(ctx, id); err != nil {
		t.Fatal(err)
	}
	j = e.claimOne("default")
	zero := int64(0)
	e.post("/v1/jobs/"+id+"/fail", gateway.FailRequest{LeaseToken: j.LeaseToken, Error: "again", RetryInMS: &zero}, &fr)
	if fr.State != skiplock.StatePending {
		t.Fatalf("retry in 0: %+v", fr)
	}
	j = e.claimOne("default")
	if j.Attempt != 3 {
		t.Fatalf("attempt %d, want 3", j.Attempt)
	}
	e.post("/v1/jobs/"+id+"/fail", gateway.FailRequest{LeaseToken: j.LeaseToken, Error: "bad input", Permanent: true}, &fr)
	if fr.State != skiplock.StateFailed || e.job(id).LastError != "bad input" {
		t.Fatalf("permanent: %+v", fr)
	}

	// Snooze gives the attempt back; cancel records its reason.
	id2 := e.enqueue("default", "k", `{}`, nil)
	j = e.claimOne("default")
	e.post("/v1/jobs/"+id2+"/snooze", gateway.SnoozeRequest{LeaseToken: j.LeaseToken, DelayMS: 0}, &fr)
	if fr.State != skiplock.StatePending || e.job(id2).Attempt != 0 {
		t.Fatalf("snooze: %+v, attempt %d", fr, e.job(id2).Attempt)
	}
	j = e.claimOne("default")
	e.post("/v1/jobs/"+id2+"/cancel", gateway.CancelRequest{LeaseToken: j.LeaseToken, Reason: "customer left"}, &fr)
	if got := e.job(id2); fr.State != skiplock.StateCancelled || got.State != skiplock.StateCancelled || got.LastError != "customer left" {
		t.Fatalf("cancel: %+v; %s %q", fr, got.State, got.LastError)
	}
}

// A worker whose lease expired and whose job was reclaimed and claimed again can
// change nothing: its calls answer 409 lease_lost and the new claim's are written.
func TestStaleCallsAfterReclaimAreRefused(t *testing.T) {
	t.Parallel()
	clock := skiplocktest.NewFakeClock(time.Now())
	e := newEnv(t, skiplock.Config{Clock: clock, RetryPolicy: fixedRetry(time.Second)}, gateway.Options{})
	id := e.enqueue("default", "k", `{}`, nil)
	stale := e.claimOne("default")

	clock.Advance(31 * time.Second) // past the 30s lease
	res, err := e.client.Manual().Reclaim(context.Background())
	if err != nil || res.Requeued != 1 {
		t.Fatalf("reclaim: %+v %v", res, err)
	}
	clock.Advance(2 * time.Second) // past the retry delay
	fresh := e.claimOne("default")
	if fresh.ID != id || fresh.LeaseToken == stale.LeaseToken || fresh.Attempt != 2 {
		t.Fatalf("second claim %+v (first %+v)", fresh, stale)
	}

	for _, c := range []struct {
		route string
		body  any
	}{
		{"complete", gateway.CompleteRequest{LeaseToken: stale.LeaseToken, Output: json.RawMessage(`"stale"`)}},
		{"fail", gateway.FailRequest{LeaseToken: stale.LeaseToken, Error: "stale", Permanent: true}},
		{"fail", gateway.FailRequest{LeaseToken: stale.LeaseToken, Error: "stale"}}, // by policy: refused on the read
		{"snooze", gateway.SnoozeRequest{LeaseToken: stale.LeaseToken, DelayMS: 1000}},
		{"cancel", gateway.CancelRequest{LeaseToken: stale.LeaseToken}},
		{"heartbeat", gateway.LeaseRequest{LeaseToken: stale.LeaseToken}},
	} {
		e.refused("POST", "/v1/jobs/"+id+"/"+c.route, workerToken, c.body, 409, gateway.CodeLeaseLost, "lease_token")
	}
	var many gateway.HeartbeatManyResponse
	e.post("/v1/heartbeat", gateway.HeartbeatManyRequest{Jobs: []gateway.JobLease{{ID: id, LeaseToken: stale.LeaseToken}}}, &many)
	if len(many.Lost) != 1 || len(many.Renewed) != 0 || many.Lost[0] != id {
		t.Fatalf("heartbeat of the stale claim: %+v", many)
	}
	e.post("/v1/heartbeat", gateway.HeartbeatManyRequest{Jobs: []gateway.JobLease{{ID: id, LeaseToken: fresh.LeaseToken}}}, &many)
	if len(many.Lost) != 0 || len(many.Renewed) != 1 || many.Renewed[0] != id {
		t.Fatalf("heartbeat of the fresh claim: %+v", many)
	}
	e.refused("POST", "/v1/heartbeat", workerToken, gateway.HeartbeatManyRequest{Jobs: []gateway.JobLease{{ID: id, LeaseToken: stale.LeaseToken}, {ID: id, LeaseToken: fresh.LeaseToken}}},
		400, gateway.CodeInvalidRequest, "jobs[1].id")
	if got := e.job(id); got.State != skiplock.StateRunning || got.LeaseToken != fresh.LeaseToken || got.Output != nil || got.LastError == "stale" {
		t.Fatalf("the stale calls changed the job: %+v", got)
	}
	var fr gateway.FinishResponse
	e.post("/v1/jobs/"+id+"/complete", gateway.CompleteRequest{LeaseToken: fresh.LeaseToken, Output: json.RawMessage(`"fresh"`)}, &fr)
	if got := e.job(id); got.State != skiplock.StateSucceeded || string(got.Output) != `"fresh"` {
		t.Fatalf("the fresh claim's completion: %+v", got)
	}
}

// countingPool is a pool whose statements are counted.
func countingPool(t *testing.T) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(skiplocktest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	n := &atomic.Int64{}
	cfg.ConnConfig.Tracer = counter{n}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, n
}

type counter struct{ n *atomic.Int64 }

func (c counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-time.After(time.Millisecond)
	}
}

// A waiting claim costs no query, and the enqueue's NOTIFY wakes it: it is answered
// long before the safety-net poll (an hour here), with one claim's statements.
func TestLongPollWakesOnNotifyAndCostsNoQueries(t *testing.T) {
	t.Parallel()
	pool, queries := countingPool(t)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: skiplocktest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, c, gateway.Options{Unauthenticated: true, PollInterval: time.Hour})
	app, err := skiplock.NewClient(skiplocktest.Pool(t), skiplock.Config{Schema: c.Schema()})
	if err != nil {
		t.Fatal(err)
	}

	type answer struct {
		status int
		body   []byte
	}
	// The listener's connect wakes every queue (a NOTIFY may have been missed): let
	// it happen before the waiting starts.
	waitFor(t, "the gateway's LISTEN connection", e.gw.Listening)
	got := make(chan answer, 3)
	for range 3 { // three idle workers wait on the queue together
		go func() {
			status, body := e.call("POST", "/v1/claim", "", gateway.ClaimRequest{Queue: "mail", WaitMS: 25000})
			got <- answer{status, body}
		}()
	}
	waitFor(t, "the three claims to wait, idle", func() bool {
		n, idle, _ := e.gw.QueueState("mail")
		return n == 3 && idle
	})
	_, _, claims := e.gw.QueueState("mail")
	before := queries.Load()
	// Idle: a while passes, and enqueues into another queue NOTIFY too; neither
	// costs the waiting claims a query.
	if _, err := app.EnqueueRaw(context.Background(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "other"}); err != nil {
		t.Fatal(err)
	}
	<-time.After(300 * time.Millisecond)
	if n := queries.Load() - before; n != 0 {
		t.Fatalf("idle waiting claims ran %d statements", n)
	}

	start := time.Now()
	id, err := app.EnqueueRaw(context.Background(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.status != 200 {
		t.Fatalf("claim: %d %s", a.status, a.body)
	}
	var cr gateway.ClaimResponse
	if err := json.Unmarshal(a.body, &cr); err != nil || len(cr.Jobs) != 1 || cr.Jobs[0].ID != id.ID {
		t.Fatalf("claim answered %s (%v), want job %s", a.body, err, id.ID)
	}
	waited := time.Since(start)
	waitFor(t, "the other two claims to wait, idle again", func() bool {
		n, idle, _ := e.gw.QueueState("mail")
		return n == 2 && idle
	})
	_, _, after := e.gw.QueueState("mail")
	// One claim woken by the NOTIFY (and possibly none more: the job was one), of
	// at most two statements each (the limits read and the claim).
	if after-claims != 1 || queries.Load()-before > 2 {
		t.Fatalf("waking took %d claims and %d statements, want 1 claim of at most 2", after-claims, queries.Load()-before)
	}
	t.Logf("woken %s after the enqueue", waited)

	// Stopping answers the claims still waiting at once: 503, retry.
	if err := e.gw.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if a := <-got; a.status != 503 || !strings.Contains(string(a.body), gateway.CodeUnavailable) {
			t.Fatalf("a waiting claim at Stop: %d %s", a.status, a.body)
		}
	}
	// Started again, it serves again.
	if err := e.gw.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id2, err := app.EnqueueRaw(context.Background(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := e.call("POST", "/v1/claim", "", gateway.ClaimRequest{Queue: "mail", WaitMS: 5000}); status != 200 || !strings.Contains(string(body), id2.ID) {
		t.Fatalf("claim after a restart: %d %s", status, body)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{}, gateway.Options{})
	claim := gateway.ClaimRequest{Queue: "default"}
	e.refused("POST", "/v1/claim", "", claim, 401, gateway.CodeUnauthenticated, "")
	e.refused("POST", "/v1/claim", "not-a-token-of-this-gateway", claim, 401, gateway.CodeUnauthenticated, "")
	e.refused("POST", "/v1/jobs/018f0000-0000-7000-8000-000000000000/complete", "", gateway.CompleteRequest{LeaseToken: "x"}, 401, gateway.CodeUnauthenticated, "")
	// A token limited to a queue claims there only.
	e.refused("POST", "/v1/claim", otherToken, claim, 403, gateway.CodeForbidden, "queue")
	if status, body := e.call("POST", "/v1/claim", otherToken, gateway.ClaimRequest{Queue: "billing"}); status != 200 {
		t.Fatalf("billing token on billing: %d %s", status, body)
	}
	// The document needs no token.
	if status, _ := e.call("GET", gateway.OpenAPIPath, "", nil); status != 200 {
		t.Fatalf("openapi: %d", status)
	}

	// An authoriser hook: 401 for ErrUnauthenticated, 403 for any other refusal.
	a := newEnv(t, skiplock.Config{}, gateway.Options{Authorize: func(r *http.Request, req gateway.Request) (string, error) {
		switch {
		case r.Header.Get("X-Worker") == "":
			return "", gateway.ErrUnauthenticated
		case req.Op == gateway.OpClaim && req.Queue != "allowed":
			return "", errors.New("not this queue")
		}
		return r.Header.Get("X-Worker"), nil
	}})
	a.refused("POST", "/v1/claim", "", gateway.ClaimRequest{Queue: "allowed"}, 401, gateway.CodeUnauthenticated, "")
	req, _ := http.NewRequest("POST", a.srv.URL+"/v1/claim", strings.NewReader(`{"queue":"secret"}`))
	req.Header.Set("X-Worker", "w1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("authoriser refusing a queue: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", a.srv.URL+"/v1/claim", strings.NewReader(`{"queue":"allowed"}`))
	req.Header.Set("X-Worker", "w1")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("authoriser allowing: %d", resp.StatusCode)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{}, gateway.Options{MaxBodyBytes: 4 << 10, MaxClaim: 10})
	const job = "/v1/jobs/018f0000-0000-7000-8000-000000000000"
	const token = "018f0000-0000-7000-8000-000000000001"
	const jobID = "018f0000-0000-7000-8000-000000000000"
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code, field        string
	}{
		{"no body", "POST", "/v1/claim", nil, 400, gateway.CodeInvalidRequest, ""},
		{"not JSON", "POST", "/v1/claim", `{"queue":`, 400, gateway.CodeInvalidRequest, ""},
		{"two values", "POST", "/v1/claim", `{"queue":"a"} {}`, 400, gateway.CodeInvalidRequest, ""},
		{"unknown field", "POST", "/v1/claim", `{"queue":"a","limt":3}`, 400, gateway.CodeInvalidRequest, "limt"},
		{"wrong type", "POST", "/v1/claim", `{"queue":"a","limit":"3"}`, 400, gateway.CodeInvalidRequest, "limit"},
		{"no queue", "POST", "/v1/claim", `{}`, 400, gateway.CodeInvalidRequest, "queue"},
		{"bad queue", "POST", "/v1/claim", `{"queue":"a b"}`, 400, gateway.CodeInvalidRequest, "queue"},
		{"limit beyond MaxClaim", "POST", "/v1/claim", `{"queue":"a","limit":11}`, 400, gateway.CodeInvalidRequest, "limit"},
		{"negative wait", "POST", "/v1/claim", `{"queue":"a","wait_ms":-1}`, 400, gateway.CodeInvalidRequest, "wait_ms"},
		{"wait beyond MaxWait", "POST", "/v1/claim", `{"queue":"a","wait_ms":30001}`, 400, gateway.CodeInvalidRequest, "wait_ms"},
		{"body too large", "POST", "/v1/claim", `{"queue":"` + strings.Repeat("a", 5000) + `"}`, 413, gateway.CodeBodyTooLarge, ""},
		{"not a job id", "POST", "/v1/jobs/42/complete", gateway.CompleteRequest{LeaseToken: token}, 400, gateway.CodeInvalidRequest, "id"},
		{"no lease token", "POST", job + "/complete", `{}`, 400, gateway.CodeInvalidRequest, "lease_token"},
		{"bad lease token", "POST", job + "/complete", `{"lease_token":"abc"}`, 400, gateway.CodeInvalidRequest, "lease_token"},
		{"output not JSON", "POST", job + "/complete", `{"lease_token":"` + token + `","output":nope}`, 400, gateway.CodeInvalidRequest, ""},
		{"fail without error", "POST", job + "/fail", `{"lease_token":"` + token + `"}`, 400, gateway.CodeInvalidRequest, "error"},
		{"permanent with a delay", "POST", job + "/fail", `{"lease_token":"` + token + `","error":"x","permanent":true,"retry_in_ms":5}`, 400, gateway.CodeInvalidRequest, "retry_in_ms"},
		{"negative retry", "POST", job + "/fail", `{"lease_token":"` + token + `","error":"x","retry_in_ms":-5}`, 400, gateway.CodeInvalidRequest, "retry_in_ms"},
		{"negative snooze", "POST", job + "/snooze", `{"lease_token":"` + token + `","delay_ms":-1}`, 400, gateway.CodeInvalidRequest, "delay_ms"},
		{"empty heartbeat", "POST", "/v1/heartbeat", `{"jobs":[]}`, 400, gateway.CodeInvalidRequest, "jobs"},
		{"empty completions", "POST", "/v1/complete", `{"jobs":[]}`, 400, gateway.CodeInvalidRequest, "jobs"},
		{"completion without a token", "POST", "/v1/complete", `{"jobs":[{"id":"` + jobID + `"}]}`, 400, gateway.CodeInvalidRequest, "jobs[0].lease_token"},
		{"completion of a bad id", "POST", "/v1/complete", `{"jobs":[{"id":"x","lease_token":"` + token + `"}]}`, 400, gateway.CodeInvalidRequest, "jobs[0].id"},
		{"completion given twice", "POST", "/v1/complete", `{"jobs":[{"id":"` + jobID + `","lease_token":"` + token + `"},{"id":"` + jobID + `","lease_token":"` + token + `"}]}`, 400, gateway.CodeInvalidRequest, "jobs[1].id"},
		{"bad heartbeat id", "POST", "/v1/heartbeat", `{"jobs":[{"id":"x","lease_token":"` + token + `"}]}`, 400, gateway.CodeInvalidRequest, "jobs[0].id"},
		{"unknown job", "POST", job + "/complete", gateway.CompleteRequest{LeaseToken: token}, 409, gateway.CodeLeaseLost, "lease_token"},
		{"no route", "POST", "/v1/nope", `{}`, 404, gateway.CodeNotFound, ""},
		{"wrong method", "GET", "/v1/claim", nil, 405, gateway.CodeMethodNotAllowed, ""},
		{"wrong method on a job", "DELETE", job + "/complete", nil, 405, gateway.CodeMethodNotAllowed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			e.refused(c.method, c.path, workerToken, c.body, c.status, c.code, c.field)
		})
	}
	e.t = t

	// A body of another type.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/claim", strings.NewReader("queue=a"))
	req.Header.Set("Authorization", "Bearer "+workerToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Fatalf("form body: %d, want 415", resp.StatusCode)
	}
	// An output beyond skiplock.MaxOutputBytes is refused before anything is written.
	big := newEnv(t, skiplock.Config{}, gateway.Options{MaxBodyBytes: 1 << 20})
	id := big.enqueue("default", "k", `{}`, nil)
	j := big.claimOne("default")
	big.refused("POST", "/v1/jobs/"+id+"/complete", workerToken,
		fmt.Sprintf(`{"lease_token":%q,"output":%q}`, j.LeaseToken, strings.Repeat("x", skiplock.MaxOutputBytes)), 400, gateway.CodeInvalidRequest, "output")
	if got := big.job(id); got.State != skiplock.StateRunning {
		t.Fatalf("a refused output changed the job: %s", got.State)
	}
}

// Options.ListenURL takes the gateway's LISTEN connection where it names (PostgreSQL
// itself, when the client's pool goes through a transaction-pooling PgBouncer), and
// a NOTIFY heard there wakes a waiting claim: with an hour's poll, only the NOTIFY can.
func TestListenURLTakesTheListener(t *testing.T) {
	t.Parallel()
	c := skiplocktest.NewClient(t, skiplock.Config{})
	url := skiplocktest.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	const app = "skiplock-gateway-direct-listener"
	e := startEnv(t, c, gateway.Options{Unauthenticated: true, PollInterval: time.Hour, ListenURL: url + sep + "application_name=" + app})
	waitFor(t, "the gateway's LISTEN connection", e.gw.Listening)
	var n int
	if err := c.Pool().QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'", app).Scan(&n); err != nil || n != 1 {
		t.Fatalf("listeners named %s: %d (%v), want 1", app, n, err)
	}
	got := make(chan string, 1)
	go func() {
		_, body := e.call("POST", "/v1/claim", "", gateway.ClaimRequest{Queue: "mail", WaitMS: 20000})
		got <- string(body)
	}()
	waitFor(t, "the claim to wait, idle", func() bool {
		n, idle, _ := e.gw.QueueState("mail")
		return n == 1 && idle
	})
	id, err := c.EnqueueRaw(context.Background(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	if body := <-got; !strings.Contains(body, id.ID) {
		t.Fatalf("the waiting claim answered %s, want job %s", body, id.ID)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	c := skiplocktest.NewClient(t, skiplock.Config{})
	for _, c2 := range []struct {
		name  string
		opts  gateway.Options
		field string
	}{
		{"no auth", gateway.Options{}, "gateway.Options.Tokens"},
		{"auth and none", gateway.Options{Unauthenticated: true, Tokens: []gateway.Token{{Worker: "w", Token: workerToken}}}, "gateway.Options.Unauthenticated"},
		{"short token", gateway.Options{Tokens: []gateway.Token{{Worker: "w", Token: "short"}}}, "gateway.Options.Tokens[0].Token"},
		{"no worker", gateway.Options{Tokens: []gateway.Token{{Token: workerToken}}}, "gateway.Options.Tokens[0].Worker"},
		{"same token", gateway.Options{Tokens: []gateway.Token{{Worker: "a", Token: workerToken}, {Worker: "b", Token: workerToken}}}, "gateway.Options.Tokens[1].Token"},
		{"tiny body", gateway.Options{Unauthenticated: true, MaxBodyBytes: 10}, "gateway.Options.MaxBodyBytes"},
		{"long wait", gateway.Options{Unauthenticated: true, MaxWait: time.Hour}, "gateway.Options.MaxWait"},
		{"push without secret", gateway.Options{Unauthenticated: true, Push: []gateway.PushTarget{{Queue: "q", URL: "http://x"}}}, "gateway.Options.Push[0].Secrets"},
		{"push to no URL", gateway.Options{Unauthenticated: true, Push: []gateway.PushTarget{{Queue: "q", URL: "ftp://x", Secrets: []string{"k"}}}}, "gateway.Options.Push[0].URL"},
		{"push twice", gateway.Options{Unauthenticated: true, Push: []gateway.PushTarget{{Queue: "q", URL: "http://x", Secrets: []string{"k"}}, {Queue: "q", URL: "http://y", Secrets: []string{"k"}}}}, "gateway.Options.Push[1].Queue"},
		{"listen url and poll only", gateway.Options{Unauthenticated: true, PollOnly: true, ListenURL: "postgres://localhost/db"}, "gateway.Options.ListenURL"},
		{"bad listen url", gateway.Options{Unauthenticated: true, ListenURL: "postgres://u:hunter2secret@localhost:notaport/db"}, "gateway.Options.ListenURL"},
	} {
		_, err := gateway.New(c, c2.opts)
		var ve *skiplock.ValidationError
		if !errors.As(err, &ve) || ve.Field != c2.field {
			t.Errorf("%s: got %v, want a ValidationError of %s", c2.name, err, c2.field)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2secret") {
			t.Errorf("%s: the error shows the password: %v", c2.name, err)
		}
	}
	if _, err := gateway.New(nil, gateway.Options{Unauthenticated: true}); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("nil client: %v", err)
	}
	// A nil or zero Gateway refuses, never panics.
	for _, z := range []*gateway.Gateway{nil, {}} {
		rec := httptest.NewRecorder()
		z.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/claim", strings.NewReader(`{"queue":"a"}`)))
		if rec.Code != 503 {
			t.Errorf("zero gateway: %d", rec.Code)
		}
		if err := z.Start(context.Background()); !errors.Is(err, skiplock.ErrInvalid) {
			t.Errorf("zero gateway's Start: %v", err)
		}
		if err := z.Stop(context.Background()); err != nil || z.Stats() != (gateway.Stats{}) {
			t.Errorf("zero gateway's Stop and Stats: %v %+v", err, z.Stats())
		}
	}
	// Not started: 503, not a hang or a panic.
	g, err := gateway.New(c, gateway.Options{Unauthenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/claim", strings.NewReader(`{"queue":"a"}`)))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), gateway.CodeUnavailable) {
		t.Fatalf("before Start: %d %s", rec.Code, rec.Body)
	}
}

// Many workers at once: every job is handed to exactly one of them, and the
// finishing calls that arrive together are written together.
func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{}, gateway.Options{})
	const n, workers = 200, 20
	jobs := make([]skiplock.EnqueueParams, n)
	for i := range jobs {
		jobs[i] = skiplock.EnqueueParams{Kind: "k", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
	}
	if _, err := e.client.EnqueueMany(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	seen := make([]atomic.Int32, n)
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for {
				var cr gateway.ClaimResponse
				status, raw := e.call("POST", "/v1/claim", workerToken, gateway.ClaimRequest{Queue: "default", Limit: 3})
				if status != 200 || json.Unmarshal(raw, &cr) != nil {
					errs <- fmt.Errorf("claim: %d %s", status, raw)
					return
				}
				if len(cr.Jobs) == 0 {
					errs <- nil
					return
				}
				for _, j := range cr.Jobs {
					var a struct{ I int }
					_ = json.Unmarshal(j.Args, &a)
					seen[a.I].Add(1)
					if status, raw := e.call("POST", "/v1/jobs/"+j.ID+"/complete", workerToken, gateway.CompleteRequest{LeaseToken: j.LeaseToken}); status != 200 {
						errs <- fmt.Errorf("complete: %d %s", status, raw)
						return
					}
				}
			}
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("job %d ran %d times", i, seen[i].Load())
		}
	}
	if c, _, err := e.client.JobCount(context.Background(), skiplock.ListParams{States: []skiplock.JobState{skiplock.StateSucceeded}}, 1000); err != nil || c != n {
		t.Fatalf("%d succeeded (%v), want %d", c, err, n)
	}
}

// fixedRetry retries after the same delay every time.
type fixedRetry time.Duration

func (f fixedRetry) Delay(int) time.Duration { return time.Duration(f) }

// claimTwoOfFive has a claim for 2 jobs wait, then enqueues 5 in one transaction (the
// waiting claim sees all five at once) and returns its answer and the five. The
// gateway claims 2 more ahead: what the previous round (the one that found nothing)
// asked.
func (e *env) claimTwoOfFive() (gateway.ClaimResponse, []skiplock.EnqueueResult) {
	e.t.Helper()
	got := make(chan gateway.ClaimResponse, 1)
	go func() {
		var cr gateway.ClaimResponse
		status, raw := e.call("POST", "/v1/claim", workerToken, gateway.ClaimRequest{Queue: "default", Limit: 2, WaitMS: 10000})
		if status == 200 {
			_ = json.Unmarshal(raw, &cr)
		}
		got <- cr
	}()
	waitFor(e.t, "the claim to wait", func() bool { n, idle, _ := e.gw.QueueState("default"); return n == 1 && idle })
	params := make([]skiplock.EnqueueParams, 5)
	for i := range params {
		params[i] = skiplock.EnqueueParams{Kind: "k", Payload: []byte(`{}`)}
	}
	enq, err := e.client.EnqueueMany(context.Background(), params)
	if err != nil {
		e.t.Fatal(err)
	}
	cr := <-got
	if len(cr.Jobs) != 2 {
		e.t.Fatalf("the waiting claim got %d jobs, want 2", len(cr.Jobs))
	}
	return cr, enq
}

// A claim takes ahead what the previous round asked, for the requests that arrive
// while it runs; jobs claimed ahead that nobody asks for within the hold (a tenth
// of the lease here) go back to the queue with their attempt given back.
func TestClaimedAheadGoBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{LeaseDuration: time.Second}, gateway.Options{PollInterval: time.Hour})
	_, enq := e.claimTwoOfFive()
	ids := map[string]bool{}
	for _, r := range enq {
		ids[r.ID] = true
	}
	st := e.gw.Stats()
	if st.Claimed != 4 {
		t.Fatalf("stats %+v: want 4 jobs claimed (2 asked, 2 ahead)", st)
	}
	e.claimOne("default") // one claimed ahead: no query
	if after := e.gw.Stats(); after.ClaimStatements != st.ClaimStatements {
		t.Fatalf("a job claimed ahead cost %d claim statements", after.ClaimStatements-st.ClaimStatements)
	}
	waitFor(t, "the other job claimed ahead to go back", func() bool { return e.gw.Stats().GivenBack == 1 })
	running, pending := 0, 0
	var states []string
	for id := range ids {
		j := e.job(id)
		states = append(states, fmt.Sprintf("%s/%d/%s", j.State, j.Attempt, j.UpdatedAt.Format("05.000")))
		switch {
		case j.State == skiplock.StateRunning || j.State == skiplock.StateClaimed: // leased (the last one's start written within a second)
			running++
		case j.State == skiplock.StatePending && j.Attempt == 0:
			pending++
		}
	}
	if running != 3 || pending != 2 {
		t.Fatalf("%d leased, %d pending with no attempt spent; want 3 and 2 (%v; %+v)", running, pending, states, e.gw.Stats())
	}
}

// Jobs the gateway claims ahead, for requests not yet arrived, read claimed (not
// running) until a request takes them, and running once it has (within about a
// second); the ones claimed for a waiting request read running at once.
func TestClaimedAheadReadClaimedUntilHandedOut(t *testing.T) {
	t.Parallel()
	// A long lease: the hold (a tenth of it) keeps the jobs claimed ahead while we look.
	e := newEnv(t, skiplock.Config{LeaseDuration: 10 * time.Minute}, gateway.Options{PollInterval: time.Hour})
	cr, enq := e.claimTwoOfFive()
	count := func() map[skiplock.JobState]int {
		m := map[skiplock.JobState]int{}
		for _, r := range enq {
			m[e.job(r.ID).State]++
		}
		return m
	}
	for _, j := range cr.Jobs {
		if s := e.job(j.ID).State; s != skiplock.StateRunning {
			t.Fatalf("a job handed out reads %s, want running", s)
		}
	}
	if c := count(); c[skiplock.StateClaimed] != 2 || c[skiplock.StateRunning] != 2 || c[skiplock.StatePending] != 1 {
		t.Fatalf("states after one request for 2 (2 more claimed ahead): %v", c)
	}
	j := e.claimOne("default") // taken from the jobs claimed ahead
	// Its start is written about a second later (the starter), as a Go worker's.
	waitFor(t, "the job taken from those claimed ahead to read running", func() bool { return e.job(j.ID).State == skiplock.StateRunning })
	if c := count(); c[skiplock.StateClaimed] != 1 || c[skiplock.StateRunning] != 3 {
		t.Fatalf("states after the second request: %v", c)
	}
	// Its lease token is the one the claim wrote: it completes.
	e.post("/v1/jobs/"+j.ID+"/complete", gateway.CompleteRequest{LeaseToken: j.LeaseToken}, nil)
	if s := e.job(j.ID).State; s != skiplock.StateSucceeded {
		t.Fatalf("the job completed through the gateway reads %s", s)
	}
}
