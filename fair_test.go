package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"

	"github.com/skiplock/skiplock"
)

// A fair queue is fair for every client: with one key's backlog of 2,000 jobs
// enqueued first, the jobs of ten other keys enqueued after it start among the first
// jobs two clients run, not after the backlog. The setting shows in QueueGet, the
// backlog in FairKeys.
func TestFairQueueAcrossClients(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	if err := e.client.QueueSetFair(e.ctx, "t", nil); !errors.Is(err, skiplock.ErrQueueNotFound) {
		t.Fatalf("QueueSetFair of a queue nothing names: %v, want ErrQueueNotFound", err)
	}
	const burst = 2000
	e.must(execSQL(e, `INSERT INTO `+e.q("jobs")+` (queue, kind, payload, concurrency_key)
SELECT 't', 'k', '{}', 'a' FROM generate_series(1, $1)`, burst))
	e.must(e.client.QueueSetFair(e.ctx, "t", nil))
	others := []string{"b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}
	for _, key := range others {
		_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "t", ConcurrencyKey: key})
		e.must(err)
	}
	info, err := e.client.QueueGet(e.ctx, "t")
	e.must(err)
	if !info.Fair || info.FairBypassPriority != nil {
		t.Fatalf("QueueGet: %+v, want fair without a bypass priority", info)
	}
	keys, err := e.client.FairKeys(e.ctx, "t", &skiplock.FairKeysOpts{Top: 1})
	e.must(err)
	if len(keys) != 2 || keys[0].Key != "a" || keys[0].Due != burst || !keys[1].Other || keys[1].Keys != 10 || keys[1].Due != 10 ||
		keys[0].OldestDue <= 0 {
		t.Fatalf("FairKeys: %+v", keys)
	}

	for range 2 {
		ws := skiplock.NewWorkers()
		e.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
		startClient(t, e.newClient(skiplock.Config{Workers: ws, Clock: realClock{},
			Queues: map[string]skiplock.QueueConfig{"t": {MaxWorkers: 2}}}))
	}
	waitFor(t, 60*time.Second, "the queue to drain", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE queue = 't' AND status = 'succeeded'") == burst+10
	})
	// Each claim goes round the 11 keys (a claim's jobs share its time, attempted_at,
	// and run in the order it chose them): the others' jobs are claimed before or with
	// the first claims of a's, not after the backlog.
	for _, key := range others {
		before := scalar[int64](e, `SELECT count(*) FROM `+e.q("jobs")+` a WHERE a.concurrency_key = 'a'
  AND a.attempted_at < (SELECT attempted_at FROM `+e.q("jobs")+` WHERE concurrency_key = $1)`, key)
		if before > 100 {
			t.Errorf("key %s's job was claimed after %d jobs of key a: want at most 100", key, before)
		}
	}
}

// A fair queue draining a backlog that nobody adds to claims more than its workers'
// number, its claims growing towards a plain queue's (the claims a wake-up prompts, and
// those while new jobs are announced, stay short: engine.fairBound), and its claims
// still take the keys in turn: each claim of several jobs holds jobs of both keys.
func TestFairQueueQuietBacklogClaimsGrow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	const n = 600
	e.must(execSQL(e, `INSERT INTO `+e.q("jobs")+` (queue, kind, payload, concurrency_key)
SELECT 'q', 'k', '{}', CASE WHEN g % 3 = 0 THEN 'b' ELSE 'a' END FROM generate_series(1, $1) g`, n))
	e.must(e.client.QueueSetFair(e.ctx, "q", nil))
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
	const workers = 4
	startClient(t, e.newClient(skiplock.Config{Workers: ws, Clock: realClock{},
		Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: workers, MaxPrefetch: 40, PrefetchWindow: time.Hour}}}))
	waitFor(t, 60*time.Second, "the queue to drain", func() bool {
		return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE queue = 'q' AND status = 'succeeded'") == n
	})
	// A claim's jobs share its time (attempted_at).
	largest := scalar[int64](e, `SELECT max(c) FROM (SELECT count(*) AS c FROM `+e.q("jobs")+` WHERE queue = 'q' GROUP BY attempted_at) x`)
	// A short claim takes at most the workers' number, a woken one the idle workers
	// and a quarter more (5 here).
	if largest <= workers+workers/4 {
		t.Fatalf("the largest claim took %d jobs: want more than %d (claims grow once nothing is announced)", largest, workers+workers/4)
	}
	// Before b's last job was claimed, both keys had due jobs (a has twice b's).
	if mixed := scalar[int64](e, `SELECT count(*) FROM (SELECT attempted_at FROM `+e.q("jobs")+` WHERE queue = 'q'
    AND attempted_at < (SELECT max(attempted_at) FROM `+e.q("jobs")+` WHERE queue = 'q' AND concurrency_key = 'b')
  GROUP BY attempted_at HAVING count(*) >= 3 AND count(DISTINCT concurrency_key) < 2) x`); mixed > 0 {
		t.Fatalf("%d claims of 3 jobs or more took one key only while both had due jobs", mixed)
	}
}

// The fair verbs refuse bad input with a *ValidationError, and QueueUnsetFair turns
// fairness off (keeping weights).
func TestFairQueueVerbs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{})
	_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "t"}) // so that something names t
	e.must(err)
	var verr *skiplock.ValidationError
	for name, err := range map[string]error{
		"weight 0":       e.client.FairWeightSet(e.ctx, "t", "a", 0),
		"weight 1001":    e.client.FairWeightSet(e.ctx, "t", "a", skiplock.MaxFairWeight+1),
		"key *":          e.client.FairWeightSet(e.ctx, "t", "*", 2),
		"queue bad":      e.client.FairWeightSet(e.ctx, "no such queue!", "a", 2),
		"set bad queue":  e.client.QueueSetFair(e.ctx, "", nil),
		"keys negative":  func() error { _, err := e.client.FairKeys(e.ctx, "t", &skiplock.FairKeysOpts{Top: -1}); return err }(),
		"keys bad queue": func() error { _, err := e.client.FairKeys(e.ctx, "", nil); return err }(),
	} {
		if !errors.As(err, &verr) {
			t.Errorf("%s: %v, want a *ValidationError", name, err)
		}
	}
	seven := 7
	e.must(e.client.QueueSetFair(e.ctx, "t", &skiplock.FairOpts{BypassPriority: &seven}))
	e.must(e.client.FairWeightSet(e.ctx, "t", "a", 5))
	e.must(e.client.FairWeightSet(e.ctx, "t", "", 2))
	e.must(e.client.FairWeightSet(e.ctx, "t", "b", 3))
	e.must(e.client.FairWeightSet(e.ctx, "t", "b", 1)) // back to the default: no row
	ws, err := e.client.FairWeights(e.ctx, "t")
	e.must(err)
	if got := fmt.Sprint(len(ws)); got != "2" || ws[0].Key != "" || ws[0].Weight != 2 || ws[1].Key != "a" || ws[1].Weight != 5 {
		t.Fatalf("FairWeights: %+v", ws)
	}
	info, err := e.client.QueueGet(e.ctx, "t")
	e.must(err)
	if !info.Fair || info.FairBypassPriority == nil || *info.FairBypassPriority != 7 {
		t.Fatalf("QueueGet: %+v", info)
	}
	e.must(e.client.QueueUnsetFair(e.ctx, "t"))
	info, err = e.client.QueueGet(e.ctx, "t")
	e.must(err)
	if info.Fair || info.FairBypassPriority != nil {
		t.Fatalf("QueueGet after QueueUnsetFair: %+v", info)
	}
	if ws, err := e.client.FairWeights(e.ctx, ""); err != nil || len(ws) != 2 {
		t.Fatalf("FairWeights after QueueUnsetFair: %+v, %v (weights are kept)", ws, err)
	}
}

func execSQL(e *env, sql string, args ...any) error {
	_, err := e.pool.Exec(e.ctx, sql, args...)
	return err
}

// TestFairQueueNotifiedClaimBesideClaimInFlight: a fair queue told of a new job while
// a claim is in flight sends its notified claim at once, beside that claim, rather
// than after it. The test holds the queue's advisory lock (the fair claims' lock), so
// that the claim a poll starts for a backlog waits in the database; the job enqueued
// then must bring a second claim to wait beside it. Once the lock is released, every
// job succeeds once.
func TestFairQueueNotifiedClaimBesideClaimInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, skiplock.Config{Clock: realClock{}})
	// One job first, so that the client knows its handlers' run time and prefetches.
	_, err := e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q", ConcurrencyKey: "w"})
	e.must(err)
	e.must(e.client.QueueSetFair(e.ctx, "q", nil))
	ws := skiplock.NewWorkers()
	e.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
	// A prefetch, so that a claim in flight leaves places for another.
	startClient(t, e.newClient(skiplock.Config{Workers: ws, Clock: realClock{}, PollInterval: 100 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: 4, MaxPrefetch: 40, PrefetchWindow: time.Hour}}}))
	succeeded := func(n int64) func() bool {
		return func() bool {
			return scalar[int64](e, "SELECT count(*) FROM "+e.q("jobs")+" WHERE queue = 'q' AND status = 'succeeded' AND attempts = 1") == n
		}
	}
	waitFor(t, 30*time.Second, "the first job", succeeded(1))

	holder, err := pgx.Connect(e.ctx, pgtest.URL(t))
	e.must(err)
	defer holder.Close(e.ctx)
	tx, err := holder.Begin(e.ctx)
	e.must(err)
	defer tx.Rollback(e.ctx)
	if _, err := tx.Exec(e.ctx, `SELECT pg_advisory_xact_lock(hashtextextended('skiplock.fair.' || $1 || '.q', 0))`,
		`"`+strings.ReplaceAll(e.schema, `"`, `""`)+`"`); err != nil {
		t.Fatal(err)
	}
	waiting := func() int64 {
		return scalar[int64](e, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'
  AND query LIKE '%skiplock.fair.%' AND strpos(query, $1) > 0`, e.schema)
	}
	// A backlog nobody announces: the next poll's claim waits for the lock.
	e.must(execSQL(e, `INSERT INTO `+e.q("jobs")+` (queue, kind, payload, concurrency_key)
SELECT 'q', 'k', '{}', 'a' FROM generate_series(1, 50) g`))
	waitFor(t, 30*time.Second, "a claim to wait for the queue's lock", func() bool { return waiting() == 1 })
	_, err = e.client.EnqueueRaw(e.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q", ConcurrencyKey: "b"})
	e.must(err)
	waitFor(t, 30*time.Second, "the notified claim to wait beside the claim in flight", func() bool { return waiting() == 2 })
	e.must(tx.Rollback(e.ctx))
	waitFor(t, 60*time.Second, "the queue to drain", succeeded(52))
}
