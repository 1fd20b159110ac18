package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/skiplocktest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// t0 is the fake clock's start.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

type env struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	clock  *skiplocktest.FakeClock
	ob     *outbox.Outbox // on the fake clock
	dbob   *outbox.Outbox // on the database's clock
	admin  outbox.Admin
	inbox  outbox.Inbox
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, pool: pgtest.Pool(t), schema: pgtest.Schema(t), clock: skiplocktest.NewFakeClock(t0)}
	e.ob = e.outbox(skiplock.Config{Clock: e.clock}, outbox.Config{})
	e.dbob = e.outbox(skiplock.Config{}, outbox.Config{})
	e.admin = e.ob.Admin()
	e.inbox = e.ob.Inbox()
	return e
}

// outbox returns the outbox of a client of the test's schema configured by cc.
func (e *env) outbox(cc skiplock.Config, oc outbox.Config) *outbox.Outbox {
	e.t.Helper()
	cc.Schema = e.schema
	c, err := skiplock.NewClient(e.pool, cc)
	e.must(err)
	e.t.Cleanup(c.Close)
	o, err := outbox.New(c, oc)
	e.must(err)
	return o
}

// writer returns an outbox on the fake clock, with ordered writes if asked.
func (e *env) writer(ordered bool) *outbox.Outbox {
	e.t.Helper()
	return e.outbox(skiplock.Config{Clock: e.clock}, outbox.Config{Ordered: ordered})
}

// relay returns a relay on the fake clock; cfg's zero fields get test-friendly values.
func (e *env) relay(pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	return e.relayOn(e.ob, pub, cfg)
}

// dbRelay returns a relay on the database's clock: a started relay's loops need real time to
// pass between polls.
func (e *env) dbRelay(pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	return e.relayOn(e.dbob, pub, cfg)
}

func (e *env) relayOn(ob *outbox.Outbox, pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	if cfg.RetryPolicy == nil {
		cfg.RetryPolicy = fixedDelay(10 * time.Second)
	}
	r, err := ob.NewRelay(pub, cfg)
	e.must(err)
	return r
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) q(table string) string { return `"` + e.schema + `".` + table }

func scalar[T any](e *env, sql string, args ...any) T {
	e.t.Helper()
	var v T
	if err := e.pool.QueryRow(e.ctx, sql, args...).Scan(&v); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func event(agg string, i int) outbox.Event {
	return outbox.Event{
		AggregateType: "order", AggregateID: agg, EventType: "order.paid", Destination: "orders",
		Payload: fmt.Appendf(nil, `{"n":%d}`, i), Headers: map[string]string{"x-tenant": "acme"},
	}
}

// writeN commits n events (aggregates agg-0..agg-(aggs-1), round robin) and returns
// their ids in write order.
func (e *env) writeN(w *outbox.Outbox, n, aggs int) []string {
	e.t.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("agg-%d", i%aggs), i)
	}
	ids, err := w.WriteMany(e.ctx, e.pool, evs)
	e.must(err)
	return ids
}

func (e *env) counts() outbox.Counts {
	e.t.Helper()
	c, err := e.admin.Count(e.ctx, e.pool)
	e.must(err)
	return c
}

func (e *env) get(id string) *outbox.Record {
	e.t.Helper()
	r, err := e.admin.Get(e.ctx, e.pool, id)
	e.must(err)
	return r
}

// runOnce runs one relay batch and fails the test on error.
func (e *env) runOnce(r *outbox.Relay) (int, int) {
	e.t.Helper()
	p, f, err := r.RunOnce(e.ctx)
	e.must(err)
	return p, f
}

type fixedDelay time.Duration

func (d fixedDelay) Delay(int) time.Duration { return time.Duration(d) }

// byID counts how often each id was published.
func byID(msgs []outbox.Message) map[string]int {
	m := map[string]int{}
	for _, msg := range msgs {
		m[msg.ID]++
	}
	return m
}

func contextWithTimeout(e *env, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, d)
}
