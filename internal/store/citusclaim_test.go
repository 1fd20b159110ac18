package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// citusStore is a store on a fresh schema of the Citus layout that knows it, with a
// time t0 and at(d), t0+d.
func citusStore(t *testing.T) (*pgxpool.Pool, *Store, time.Time, func(time.Duration) *time.Time) {
	t.Helper()
	pool, schema := pgtest.CitusSchema(t)
	s := newStore(t, schema)
	if dist, err := s.Distributed(context.Background(), pool); err != nil || !dist {
		t.Fatalf("Distributed = %v, %v", dist, err)
	}
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	return pool, s, t0, func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
}

// TestCitusWorkerStatements runs the workers' statements of the Citus layout on the
// real cluster (SKIPLOCK_TEST_CITUS_URL), with an injected clock: the key table lists
// the keys with pending jobs; a claim takes the due jobs of its key only, in claim
// order, under one token; a heartbeat renews a lease it holds and not a stale one;
// completions, retries, snoozes, failures and cancels write their states and are fenced
// by the token; an expired lease is listed with its key and reclaimed, after which the
// old token writes nothing; an idle key leaves the key table, and a key whose pending
// job is being written in an open transaction does not.
func TestCitusWorkerStatements(t *testing.T) {
	t.Parallel()
	pool, s, t0, at := citusStore(t)
	ctx := context.Background()
	insert := func(key string, n int, runAt time.Time) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key, run_at, max_attempts)
			SELECT 'k', jsonb_build_object('i', i), $1, $2, 2 FROM generate_series(1, $3) i`, key, runAt, n); err != nil {
			t.Fatal(err)
		}
	}
	insert("acme", 5, t0.Add(-time.Minute))
	insert("globex", 2, t0.Add(-time.Minute))
	insert("later", 1, t0.Add(time.Hour))
	insert("", 1, t0.Add(-time.Minute))

	// A key whose jobs are all due later is left out until they are due.
	keys, err := s.CitusKeys(ctx, pool, at(0), "default", nil, 10)
	if err != nil || !slices.Equal(keys, []string{"", "acme", "globex"}) {
		t.Fatalf("CitusKeys = %q, %v", keys, err)
	}
	if keys, err := s.CitusKeys(ctx, pool, at(time.Hour), "default", nil, 10); err != nil || !slices.Equal(keys, []string{"", "acme", "globex", "later"}) {
		t.Fatalf("CitusKeys an hour later = %q, %v", keys, err)
	}
	after := "acme"
	if keys, err := s.CitusKeys(ctx, pool, at(0), "default", &after, 1); err != nil || !slices.Equal(keys, []string{"globex"}) {
		t.Fatalf("CitusKeys after acme = %q, %v", keys, err)
	}

	p := ClaimParams{Queue: "default", WorkerID: "w1", Limit: 3, Lease: 30 * time.Second, Waiting: 1}
	jobs, err := s.ClaimKey(ctx, pool, at(0), p, "acme")
	if err != nil || len(jobs) != 3 {
		t.Fatalf("ClaimKey(acme) = %d jobs, %v", len(jobs), err)
	}
	for i, j := range jobs {
		if j.ConcurrencyKey != "acme" || j.Status != StatusRunning || j.LeaseToken == nil || *j.LeaseToken != *jobs[0].LeaseToken ||
			!j.LeaseUntil.Equal(*at(30 * time.Second)) || j.Attempts != 1 || j.Started != (i < 2) {
			t.Fatalf("claimed job %d: %+v", i, j)
		}
	}
	if later, err := s.ClaimKey(ctx, pool, at(0), p, "later"); err != nil || len(later) != 0 {
		t.Fatalf("ClaimKey(later) before its run_at = %d jobs, %v", len(later), err)
	}
	lease := func(j *Job) Lease { return Lease{ID: j.ID, Token: *j.LeaseToken, Key: j.ConcurrencyKey} }
	stale := Lease{ID: jobs[2].ID, Token: "00000000-0000-4000-8000-000000000000", Key: "acme"}

	renewed, err := s.Heartbeat(ctx, pool, at(10*time.Second), []Lease{lease(jobs[0]), lease(jobs[1]), stale}, 30*time.Second, []bool{false, true, false})
	if err != nil || len(renewed) != 2 || !renewed[jobs[0].ID] || !renewed[jobs[1].ID] {
		t.Fatalf("Heartbeat = %v, %v; want the two live leases renewed, not the stale one", renewed, err)
	}

	// Outcomes for two keys in one batch, with a stale token among them.
	g, err := s.ClaimKey(ctx, pool, at(0), ClaimParams{Queue: "default", WorkerID: "w1", Limit: 5, Lease: 30 * time.Second}, "globex")
	if err != nil || len(g) != 2 {
		t.Fatalf("ClaimKey(globex) = %d, %v", len(g), err)
	}
	outs := []Outcome{
		{Lease: lease(jobs[0]), Action: ActionComplete, Output: []byte(`{"ok":true}`)},
		{Lease: lease(jobs[1]), Action: ActionRetry, Delay: time.Minute, Error: "boom"},
		{Lease: stale, Action: ActionComplete},
		{Lease: lease(g[0]), Action: ActionSnooze, Delay: time.Second},
		{Lease: lease(g[1]), Action: ActionCancel, Error: "no"},
	}
	res, err := s.Finish(ctx, pool, at(20*time.Second), outs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Lease]string{lease(jobs[0]): StatusSucceeded, lease(jobs[1]): StatusPending, lease(g[0]): StatusPending, lease(g[1]): StatusCancelled}
	if len(res) != len(want) {
		t.Fatalf("Finish = %v, want %v (the stale token writes nothing)", res, want)
	}
	for l, st := range want {
		if res[l] != st {
			t.Fatalf("Finish = %v, want %v", res, want)
		}
	}
	var runAt time.Time
	var attempts int
	var hist []map[string]any
	if err := pool.QueryRow(ctx, `SELECT run_at, attempts, attempt_history FROM `+s.Table("jobs")+` WHERE id = $1`, jobs[1].ID).
		Scan(&runAt, &attempts, &hist); err != nil {
		t.Fatal(err)
	}
	if !runAt.Equal(*at(20*time.Second + time.Minute)) || attempts != 1 || len(hist) != 1 || hist[0]["outcome"] != "retried" ||
		hist[0]["error"] != "boom" || hist[0]["finished_at"] != "2030-01-01T12:00:20+00:00" {
		t.Fatalf("retried job: run_at %v, attempts %d, history %v", runAt, attempts, hist)
	}
	if err := pool.QueryRow(ctx, `SELECT attempts FROM `+s.Table("jobs")+` WHERE id = $1`, g[0].ID).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("snoozed job: attempts %d (%v), want its attempt given back", attempts, err)
	}

	// jobs[2]'s lease expires: listed with its key, reclaimed, and its token fenced out.
	exp, err := s.ListExpired(ctx, pool, at(time.Hour), nil, 10)
	if err != nil || len(exp) != 1 || exp[0].Lease != lease(jobs[2]) {
		t.Fatalf("ListExpired = %+v, %v; want jobs[2]'s lease with its key", exp, err)
	}
	rec, err := s.Reclaim(ctx, pool, at(time.Hour), []Lease{exp[0].Lease}, []time.Duration{0})
	if err != nil || rec[jobs[2].ID] != StatusPending {
		t.Fatalf("Reclaim = %v, %v", rec, err)
	}
	if res, err := s.Finish(ctx, pool, at(time.Hour), []Outcome{{Lease: lease(jobs[2]), Action: ActionComplete}}); err != nil || len(res) != 0 {
		t.Fatalf("a completion under the reclaimed token = %v, %v; want nothing written", res, err)
	}
	if res, err := s.FinishDeleting(ctx, pool, at(time.Hour), []Outcome{{Lease: lease(jobs[2]), Action: ActionComplete}}); err != nil || len(res) != 0 {
		t.Fatalf("a deleting completion under the reclaimed token = %v, %v; want nothing written", res, err)
	}
	again, err := s.ClaimKey(ctx, pool, at(time.Hour), ClaimParams{Queue: "default", WorkerID: "w2", Limit: 10, Lease: time.Minute}, "acme")
	if err != nil || len(again) != 4 { // jobs[2] reclaimed, jobs[1] retried (due), and the two never claimed
		t.Fatalf("ClaimKey(acme) after the reclaim = %d jobs, %v", len(again), err)
	}
	var leases []Outcome
	for _, j := range again {
		leases = append(leases, Outcome{Lease: lease(j), Action: ActionComplete})
	}
	if res, err := s.FinishDeleting(ctx, pool, at(time.Hour), leases); err != nil || len(res) != 4 {
		t.Fatalf("FinishDeleting = %v, %v", res, err)
	}

	// acme has no pending job now: its claim finds nothing and its key goes.
	if idle, err := s.CitusKeyIdle(ctx, pool, at(0), "default", "acme"); err != nil || !idle {
		t.Fatalf("CitusKeyIdle(acme) = %v, %v; want removed", idle, err)
	}
	if idle, err := s.CitusKeyIdle(ctx, pool, at(0), "default", "later"); err != nil || idle {
		t.Fatalf("CitusKeyIdle(later) = %v, %v; want kept (a job scheduled later)", idle, err)
	}
	// A job of acme being written in an open transaction keeps the key, which the
	// insert added back.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key) VALUES ('k', '{}', 'acme')`); err != nil {
		t.Fatal(err)
	}
	if idle, err := s.CitusKeyIdle(ctx, pool, at(0), "default", "acme"); err != nil || idle {
		t.Fatalf("CitusKeyIdle(acme) with a job being written = %v, %v; want kept", idle, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.CitusKeys(ctx, pool, at(0), "default", nil, 10); err != nil || !slices.Contains(keys, "acme") {
		t.Fatalf("CitusKeys after the commit = %q, %v; want acme listed", keys, err)
	}
}

// TestCitusKeyDeferred: on the real cluster a key whose pending jobs are all due later
// is left out of the walk once a claim of it found nothing (CitusKeyIdle defers it to
// the earliest), and listed again as soon as one of its jobs is due: a job enqueued
// due, a job's run_at moved earlier, or the time reached.
func TestCitusKeyDeferred(t *testing.T) {
	t.Parallel()
	pool, s, t0, at := citusStore(t)
	ctx := context.Background()
	listed := func(now *time.Time) bool {
		t.Helper()
		keys, err := s.CitusKeys(ctx, pool, now, "default", nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(keys, "snoozy")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key, run_at) VALUES ('k', '{}', 'snoozy', $1)`, t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.ClaimKey(ctx, pool, at(0), ClaimParams{Queue: "default", WorkerID: "w", Limit: 1, Lease: time.Minute}, "snoozy")
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimKey = %d jobs, %v", len(jobs), err)
	}
	// Snoozed for two hours: the key's row stays (it had a due job) and is listed ...
	lease := Lease{ID: jobs[0].ID, Token: *jobs[0].LeaseToken, Key: jobs[0].ConcurrencyKey}
	if res, err := s.Finish(ctx, pool, at(0), []Outcome{{Lease: lease, Action: ActionSnooze, Delay: 2 * time.Hour}}); err != nil || len(res) != 1 {
		t.Fatalf("snooze = %v, %v", res, err)
	}
	if !listed(at(0)) {
		t.Fatal("the key is not listed before a claim found nothing")
	}
	// ... until a claim of it finds nothing: then it is deferred to the snoozed job.
	if got, err := s.ClaimKey(ctx, pool, at(0), ClaimParams{Queue: "default", WorkerID: "w", Limit: 1, Lease: time.Minute}, "snoozy"); err != nil || len(got) != 0 {
		t.Fatalf("ClaimKey of a snoozed key = %d jobs, %v", len(got), err)
	}
	if idle, err := s.CitusKeyIdle(ctx, pool, at(0), "default", "snoozy"); err != nil || idle {
		t.Fatalf("CitusKeyIdle = %v, %v; want kept", idle, err)
	}
	if listed(at(time.Hour)) || !listed(at(2*time.Hour)) {
		t.Fatal("a deferred key: want it left out an hour on, listed at its job's run_at")
	}
	// A job's run_at moved earlier (as admin_run_now does) lists it again.
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET run_at = $1 WHERE concurrency_key = 'snoozy'`, t0); err != nil {
		t.Fatal(err)
	}
	if !listed(at(0)) {
		t.Fatal("the key is not listed after its job's run_at moved to now")
	}
	// Deferred again, then a due job enqueued: listed again.
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET run_at = $1 WHERE concurrency_key = 'snoozy'`, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if idle, err := s.CitusKeyIdle(ctx, pool, at(0), "default", "snoozy"); err != nil || idle || listed(at(0)) {
		t.Fatalf("CitusKeyIdle = %v, %v; want the key kept and deferred", idle, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key, run_at) VALUES ('k', '{}', 'snoozy', $1)`, t0); err != nil {
		t.Fatal(err)
	}
	if !listed(at(0)) {
		t.Fatal("the key is not listed after a due job was enqueued")
	}
	// A key with a due job is never deferred, even when its claim found nothing (a
	// job held by another transaction, a sequence waiting, a paused queue).
	if idle, err := s.CitusKeyIdle(ctx, pool, at(0), "default", "snoozy"); err != nil || idle || !listed(at(0)) {
		t.Fatalf("CitusKeyIdle with a due job = %v, %v; want the key kept and listed", idle, err)
	}
}

// TestCitusOutboxStatements runs the relay's statements of the Citus layout on the
// real cluster: a claim takes the due events of every key with unpublished events, each
// key by its own statement, and returns their keys; a mark under a stale token writes
// nothing; published, retried and dead marks write their states; a key whose events
// are all published leaves the key table at the next claim.
func TestCitusOutboxStatements(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	ctx := context.Background()
	s := newStore(t, schema)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	var evs []OutboxInsertParams
	for _, k := range []string{"acme", "acme", "globex", ""} {
		evs = append(evs, OutboxInsertParams{AggregateType: "order", AggregateID: "1", EventType: "placed", Payload: []byte(`{}`),
			Headers: []byte(`{}`), MaxAttempts: 2, ConcurrencyKey: k})
	}
	if _, err := s.OutboxInsert(ctx, pool, &t0, evs, OutboxInsertOptions{}); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.CitusKeys(ctx, pool, nil, OutboxKeys, nil, 10); err != nil || !slices.Equal(keys, []string{"", "acme", "globex"}) {
		t.Fatalf("the outbox's keys = %q, %v", keys, err)
	}
	got, err := s.OutboxClaim(ctx, pool, &t0, OutboxClaimParams{Limit: 10, Lease: time.Minute, Ordered: true})
	if err != nil {
		t.Fatal(err)
	}
	// Ordered: acme's second event waits for its first (same aggregate, same key).
	if len(got) != 3 {
		t.Fatalf("claimed %d events, want 3 (one per key)", len(got))
	}
	var outs []OutboxOutcome
	for i, e := range got {
		o := OutboxOutcome{ID: e.ID, Token: *e.RelayToken, Key: e.ConcurrencyKey, Action: OutboxPublished}
		if i == 1 {
			o.Action, o.Delay, o.Error = OutboxRetry, time.Second, "broker down"
		}
		outs = append(outs, o)
	}
	stale := OutboxOutcome{ID: got[0].ID, Token: "00000000-0000-4000-8000-000000000000", Key: got[0].ConcurrencyKey, Action: OutboxDead}
	res, err := s.OutboxFinish(ctx, pool, &t0, append([]OutboxOutcome{stale}, outs...))
	if err != nil || len(res) != 3 || res[got[0].ID] != OutboxPublished || res[got[1].ID] != OutboxRetry {
		t.Fatalf("OutboxFinish = %v, %v; want the three live marks written, not the stale one", res, err)
	}
	later := t0.Add(time.Hour)
	rest, err := s.OutboxClaim(ctx, pool, &later, OutboxClaimParams{Limit: 10, Lease: time.Minute, Ordered: true})
	if err != nil || len(rest) != 2 {
		t.Fatalf("the second claim = %d events, %v; want the retried one and acme's second", len(rest), err)
	}
	outs = outs[:0]
	for _, e := range rest {
		outs = append(outs, OutboxOutcome{ID: e.ID, Token: *e.RelayToken, Key: e.ConcurrencyKey, Action: OutboxPublished})
	}
	if res, err := s.OutboxFinish(ctx, pool, &later, outs); err != nil || len(res) != 2 {
		t.Fatalf("OutboxFinish = %v, %v", res, err)
	}
	if none, err := s.OutboxClaim(ctx, pool, &later, OutboxClaimParams{Limit: 10, Lease: time.Minute}); err != nil || len(none) != 0 {
		t.Fatalf("a claim with nothing left = %d, %v", len(none), err)
	}
	if keys, err := s.CitusKeys(ctx, pool, nil, OutboxKeys, nil, 10); err != nil || len(keys) != 0 {
		t.Fatalf("the outbox's keys once every event is published = %q, %v", keys, err)
	}
}
