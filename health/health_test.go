package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
	"github.com/skiplock/skiplock/skiplocktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func get(t *testing.T, h http.Handler, path string) (int, health.Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var rep health.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v in %q", path, err, rec.Body.String())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: content type %q", path, ct)
	}
	return rec.Code, rep
}

func TestReadyzFailsOnOldDueJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := skiplocktest.NewFakeClock(t0)
	schema := pgtest.Schema(t)
	c, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: schema, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := health.Handler(c, health.Options{MaxOldestDue: time.Minute, MaxOutboxLag: 10 * time.Minute})
	if code, rep := get(t, h, "/healthz"); code != 200 || rep.Status != "ok" {
		t.Fatalf("healthz: %d %+v", code, rep)
	}
	if _, err := c.EnqueueRawTx(ctx, c.Pool(), "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(59 * time.Second)
	if code, rep := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("readyz at 59s: %d %+v", code, rep)
	}
	clock.Advance(2 * time.Second)
	code, rep := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || rep.Status != "not_ready" || len(rep.Reasons) != 1 ||
		rep.Reasons[0].Queue != "mail" || rep.Reasons[0].Check != "oldest_due_age" || rep.Reasons[0].ValueSeconds != 61 {
		t.Fatalf("readyz at 61s: %d %+v", code, rep)
	}
	// An outbox event waiting too long is a reason too.
	if _, err := c.Pool().Exec(ctx, `INSERT INTO "`+schema+`".outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
VALUES ('o', '1', 'e', '{}', $1::timestamptz - interval '1 hour')`, clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, rep = get(t, h, "/readyz")
	if len(rep.Reasons) != 2 || rep.Reasons[1].Check != "outbox_lag" {
		t.Fatalf("readyz with outbox lag: %+v", rep)
	}
	// A relay's or a dashboard's readiness leaves the queues out: the old job does not
	// make it unready, the outbox lag still does when asked for.
	serving := health.Handler(c, health.Options{MaxOldestDue: time.Minute, SkipQueues: true})
	if code, rep := get(t, serving, "/readyz"); code != 200 || rep.Status != "ok" {
		t.Fatalf("readyz with SkipQueues: %d %+v", code, rep)
	}
	relay := health.Handler(c, health.Options{MaxOldestDue: time.Minute, MaxOutboxLag: 10 * time.Minute, SkipQueues: true})
	if code, rep := get(t, relay, "/readyz"); code != http.StatusServiceUnavailable || len(rep.Reasons) != 1 || rep.Reasons[0].Check != "outbox_lag" {
		t.Fatalf("readyz with SkipQueues and MaxOutboxLag: %d %+v", code, rep)
	}
}

func TestHealthzFailsWithoutDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t, 2)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: pgtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pool.Close()
	h := health.Handler(c, health.Options{})
	if code, rep := get(t, h, "/healthz"); code != http.StatusServiceUnavailable || rep.Status != "unavailable" || rep.Error == "" {
		t.Fatalf("healthz with a closed pool: %d %+v", code, rep)
	}
	if code, _ := get(t, h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with a closed pool: %d", code)
	}
}

// A process whose claims keep failing is not ready, with the operation and its last
// error as the reason, even while its queues look fine from the database.
func TestReadyzFailsWhileAnOperationKeepsFailing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	// Every claim now fails: a trigger refuses updates of jobs (reads still work).
	if _, err := pool.Exec(ctx, `CREATE FUNCTION "`+schema+`".refuse() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'claims refused by the test'; END$$;
CREATE TRIGGER refuse BEFORE UPDATE ON "`+schema+`".jobs FOR EACH ROW EXECUTE FUNCTION "`+schema+`".refuse()`); err != nil {
		t.Fatal(err)
	}
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{"mail": {MaxWorkers: 1}}, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueRawTx(ctx, pool, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for len(c.Operations()) == 0 || !c.Operations()[0].Failing {
		if time.Now().After(deadline) {
			t.Fatal("the claim never failed")
		}
		<-time.After(5 * time.Millisecond) // polling the client's operation status
	}
	h := health.Handler(c, health.Options{MaxFailing: time.Nanosecond})
	code, rep := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || len(rep.Reasons) != 1 || rep.Reasons[0].Check != "operation_failing" ||
		rep.Reasons[0].Operation != "claim" || !strings.Contains(rep.Reasons[0].Message, "claims refused by the test") {
		t.Fatalf("readyz while claims fail: %d %+v", code, rep)
	}
	if code, _ := get(t, health.Handler(c, health.Options{MaxFailing: time.Hour}), "/readyz"); code != 200 {
		t.Fatalf("readyz with a failure shorter than MaxFailing: %d", code)
	}
}

// An outbox relay given as a component makes /readyz fail while its publishes keep
// failing, with its operation as the reason; the client alone stays ready.
func TestReadyzChecksARelayComponent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: pgtest.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ob, err := outbox.New(c, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub := memorypub.New()
	pub.SetFailure(func(outbox.Message) error { return errors.New("broker unreachable") })
	relay, err := ob.NewRelay(pub, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	opts := health.Options{MaxFailing: time.Nanosecond, Components: []health.Component{nil, relay}}
	if code, rep := get(t, health.Handler(c, opts), "/readyz"); code != 200 {
		t.Fatalf("readyz before the relay failed: %d %+v", code, rep)
	}
	if _, err := ob.Write(ctx, pool, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "paid", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, failed, err := relay.RunOnce(ctx); err != nil || failed != 1 {
		t.Fatalf("RunOnce: failed %d, %v", failed, err)
	}
	code, rep := get(t, health.Handler(c, opts), "/readyz")
	if code != http.StatusServiceUnavailable || len(rep.Reasons) != 1 || rep.Reasons[0].Check != "operation_failing" ||
		rep.Reasons[0].Operation != "relay:publish" || !strings.Contains(rep.Reasons[0].Message, "broker unreachable") {
		t.Fatalf("readyz while the relay's publishes fail: %d %+v", code, rep)
	}
	if code, rep := get(t, health.Handler(c, health.Options{MaxFailing: time.Nanosecond}), "/readyz"); code != 200 {
		t.Fatalf("readyz without the relay as a component: %d %+v", code, rep)
	}
}

// /readyz fails while the database takes no writes — a pool that reached a read-only
// server (a standby, a fenced old primary) — with a "writable" reason, though every
// read works; SkipWritable leaves the check out for processes that only read.
func TestReadyzFailsWhileTheDatabaseTakesNoWrites(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	cfg := pgtest.Pool(t).Config()
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.MaxConns = 2
	ro, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	c, err := skiplock.NewClient(ro, skiplock.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, _ := get(t, health.Handler(c, health.Options{}), "/healthz"); code != 200 {
		t.Fatalf("healthz on a read-only server: %d; want 200 (it answers)", code)
	}
	code, rep := get(t, health.Handler(c, health.Options{}), "/readyz")
	if code != http.StatusServiceUnavailable || rep.Status != "not_ready" || len(rep.Reasons) != 1 ||
		rep.Reasons[0].Check != "writable" || !strings.Contains(rep.Reasons[0].Message, "read-only") {
		t.Fatalf("readyz on a read-only server: %d %+v; want not_ready with one writable reason", code, rep)
	}
	if err := c.CheckWritable(context.Background()); err == nil {
		t.Fatal("CheckWritable on a read-only server: nil")
	}
	if code, rep := get(t, health.Handler(c, health.Options{SkipWritable: true}), "/readyz"); code != 200 {
		t.Fatalf("readyz with SkipWritable: %d %+v", code, rep)
	}
	writable, err := skiplock.NewClient(pgtest.Pool(t), skiplock.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer writable.Close()
	if err := writable.CheckWritable(context.Background()); err != nil {
		t.Fatalf("CheckWritable on the primary: %v", err)
	}
}
