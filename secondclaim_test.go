package skiplock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"

	"github.com/skiplock/skiplock"
)

// The tests of a plain queue's second claim (internal/engine/producer.go, "A second
// claim"). They stop plain claims in the database by holding the limits table's
// ACCESS EXCLUSIVE lock: the plain claim reads it (whether a limit governs the
// queue), so a claim sent meanwhile waits for it and shows in pg_stat_activity.

// secondClaimEnv is a client of queue q with 4 workers, a prefetch of 12 and claims
// of at most 4 jobs (so a claim comes back full under any backlog), whose handlers
// wait for gate while hold is set.
type secondClaimEnv struct {
	*env
	client *skiplock.Client
	hold   atomic.Bool
	gate   chan struct{}
	open   sync.Once
}

// release lets the held handlers return (and every later one run at once).
func (s *secondClaimEnv) release() { s.open.Do(func() { close(s.gate) }) }

func newSecondClaimEnv(t *testing.T, poll time.Duration) *secondClaimEnv {
	t.Helper()
	s := &secondClaimEnv{env: newEnv(t, skiplock.Config{Clock: realClock{}}), gate: make(chan struct{})}
	ws := skiplock.NewWorkers()
	s.must(ws.AddHandler("k", func(ctx context.Context, _ *skiplock.Job) error {
		if s.hold.Load() {
			select {
			case <-s.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, nil))
	s.client = s.newClient(skiplock.Config{Workers: ws, Clock: realClock{}, PollInterval: poll, FetchLimit: 4,
		Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: 4, MaxPrefetch: 12, PrefetchWindow: time.Hour}}})
	return s
}

// start starts the client, to be stopped at cleanup after its held handlers are
// released (cleanups run last first): a failed test does not hold them through the
// stop.
func (s *secondClaimEnv) start() {
	s.t.Helper()
	startClient(s.t, s.client)
	s.t.Cleanup(s.release)
}

// succeeded counts q's jobs that succeeded at their first attempt.
func (s *secondClaimEnv) succeeded() int64 {
	return scalar[int64](s.env, "SELECT count(*) FROM "+s.q("jobs")+" WHERE queue = 'q' AND status = 'succeeded' AND attempts = 1")
}

// waitingClaims counts this schema's plain claims waiting for a lock.
func (s *secondClaimEnv) waitingClaims() int64 {
	return scalar[int64](s.env, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
  AND query LIKE '%p.paused_at IS NOT NULL OR p.fair%' AND strpos(query, $1) > 0`, s.schema)
}

// lockClaims takes the lock that stops plain claims, until the returned release.
func (s *secondClaimEnv) lockClaims() (release func()) {
	s.t.Helper()
	holder, err := pgx.Connect(s.ctx, pgtest.URL(s.t))
	s.must(err)
	tx, err := holder.Begin(s.ctx)
	s.must(err)
	_, err = tx.Exec(s.ctx, "LOCK TABLE "+s.q("limits")+" IN ACCESS EXCLUSIVE MODE")
	s.must(err)
	done := false
	release = func() {
		if !done {
			done = true
			s.must(tx.Rollback(s.ctx))
			holder.Close(s.ctx)
		}
	}
	s.t.Cleanup(release)
	return release
}

// firstJob runs one job, so that the client knows its handlers' run time and
// prefetches (before that, it claims for its workers only).
func (s *secondClaimEnv) firstJob() {
	s.t.Helper()
	_, err := s.client.EnqueueRaw(s.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q"})
	s.must(err)
	waitFor(s.t, 30*time.Second, "the first job", func() bool { return s.succeeded() == 1 })
}

// backlog inserts n jobs of q by SQL (nobody announces them: a poll finds them).
func (s *secondClaimEnv) backlog(n int) {
	s.t.Helper()
	s.must(execSQL(s.env, `INSERT INTO `+s.q("jobs")+` (queue, kind, payload) SELECT 'q', 'k', '{}' FROM generate_series(1, $1) g`, n))
}

// listening counts the client's listener connections (0 once a stop ended them).
func (s *secondClaimEnv) listening() int64 {
	return scalar[int64](s.env, `SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'listen%' AND strpos(query, $1) > 0`,
		skiplock.Channel(s.schema))
}

// leased counts q's jobs leased now (claimed or running).
func (s *secondClaimEnv) leased() int64 {
	return scalar[int64](s.env, "SELECT count(*) FROM "+s.q("jobs")+" WHERE queue = 'q' AND status = 'running'")
}

// TestPlainQueueSecondClaimUnderBacklog: a plain queue whose claim came back full
// sends a second claim beside the one in flight while places are free, and never
// holds more jobs than its workers and prefetch. With every place taken (handlers
// held), nothing more is claimed; once they are freed, with claims stopped in the
// database, two claims wait there side by side — no third — and once they go on,
// every job succeeds once.
func TestPlainQueueSecondClaimUnderBacklog(t *testing.T) {
	t.Parallel()
	s := newSecondClaimEnv(t, 50*time.Millisecond)
	s.start()
	s.firstJob()

	s.hold.Store(true)
	s.backlog(100)
	// The places (4 workers + 12 prefetched) fill in claims of 4: the first full claim
	// is followed by one claim, and another beside it while the first is in flight.
	// A claim's jobs are counted once handed over, after its commit shows them leased.
	waitFor(t, 30*time.Second, "the queue's places to fill", func() bool {
		return s.leased() == 16 && s.client.Counters().Claimed == 1+16
	})
	c := s.client.Counters()
	if c.ClaimsBeside == 0 {
		t.Fatalf("no claim was sent beside another under a backlog (%d claims of %d jobs)", c.ClaimStatements, c.Claimed)
	}

	release := s.lockClaims()
	s.release() // the held handlers return and free their places
	waitFor(t, 30*time.Second, "two claims to wait side by side", func() bool { return s.waitingClaims() == 2 })
	if n := s.leased(); n > 16 {
		t.Fatalf("%d jobs leased, more than the 16 places", n)
	}
	release()
	waitFor(t, 60*time.Second, "the backlog to drain", func() bool { return s.succeeded() == 101 })
	if n := s.leased(); n != 0 {
		t.Fatalf("%d jobs still leased after the backlog drained", n)
	}
}

// TestPlainQueueNoSecondClaimAtIdle: an idle queue's claims go one at a time. With
// no polls (an hour's interval), each job enqueued to an idle queue costs exactly
// one claim statement, the rate of an idle worker's claims is unchanged; and a job
// announced while the claim for another waits in the database (its queue had no
// backlog: the last claim was short) brings no claim beside it.
func TestPlainQueueNoSecondClaimAtIdle(t *testing.T) {
	t.Parallel()
	s := newSecondClaimEnv(t, time.Hour)
	s.start()
	waitFor(t, 30*time.Second, "the client's listener", func() bool { return s.listening() == 1 })
	s.firstJob()
	enqueue := func(ran int64) {
		_, err := s.client.EnqueueRaw(s.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q"})
		s.must(err)
		waitFor(t, 30*time.Second, "an idle queue's job", func() bool { return s.succeeded() == ran })
	}
	enqueue(2) // the claims of the start (the listener's connection prompts one) are over by now
	before := s.client.Counters()
	for i := range int64(10) {
		enqueue(3 + i)
	}
	// A claim is counted before its jobs are (engine.claim): once the ten jobs are,
	// every claim that took one is.
	waitFor(t, 30*time.Second, "the claims to be counted", func() bool { return s.client.Counters().Claimed == before.Claimed+10 })
	after := s.client.Counters()
	if n := after.ClaimStatements - before.ClaimStatements; n != 10 {
		t.Fatalf("10 jobs enqueued one at a time to an idle queue cost %d claim statements, want 10", n)
	}

	release := s.lockClaims()
	_, err := s.client.EnqueueRaw(s.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q"})
	s.must(err)
	waitFor(t, 30*time.Second, "the claim for the job to wait", func() bool { return s.waitingClaims() == 1 })
	for range 3 {
		_, err := s.client.EnqueueRaw(s.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "q"})
		s.must(err)
	}
	release()
	waitFor(t, 30*time.Second, "the jobs", func() bool { return s.succeeded() == 16 })
	if c := s.client.Counters(); c.ClaimsBeside != 0 {
		t.Fatalf("%d claims sent beside another at idle", c.ClaimsBeside)
	}
}

// TestStopWithTwoClaimsInFlight: a client stopped while two claims wait in the
// database loses nothing: Stop waits for both, hands their jobs back unstarted,
// leaves no lease behind, and another client then runs every job once.
func TestStopWithTwoClaimsInFlight(t *testing.T) {
	t.Parallel()
	s := newSecondClaimEnv(t, 50*time.Millisecond)
	if err := s.client.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.firstJob()
	s.hold.Store(true)
	s.backlog(100)
	waitFor(t, 30*time.Second, "the queue's places to fill", func() bool { return s.leased() == 16 })
	release := s.lockClaims()
	s.release()
	waitFor(t, 30*time.Second, "two claims to wait side by side", func() bool { return s.waitingClaims() == 2 })

	waitFor(t, 30*time.Second, "the client's listener", func() bool { return s.listening() == 1 })
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- s.client.Stop(ctx)
	}()
	// The stop ends the claiming (its listener leaves), then waits for the claims in
	// flight: it cannot return while they wait.
	waitFor(t, 30*time.Second, "the stop to end the claiming", func() bool { return s.listening() == 0 })
	if len(stopped) != 0 || s.waitingClaims() != 2 {
		t.Fatalf("the stop returned (%d) or the claims stopped waiting (%d) before the lock was released", len(stopped), s.waitingClaims())
	}
	release()
	if err := receive(t, stopped, "the stop"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := s.leased(); n != 0 {
		t.Fatalf("%d jobs left leased after the stop", n)
	}
	done := s.succeeded()
	pending := scalar[int64](s.env, "SELECT count(*) FROM "+s.q("jobs")+" WHERE queue = 'q' AND status = 'pending' AND attempts = 0")
	if done+pending != 101 {
		t.Fatalf("after the stop: %d succeeded and %d pending at attempt 0, want 101 in all", done, pending)
	}

	ws := skiplock.NewWorkers()
	s.must(ws.AddHandler("k", func(context.Context, *skiplock.Job) error { return nil }, nil))
	startClient(t, s.newClient(skiplock.Config{Workers: ws, Clock: realClock{}, PollInterval: 50 * time.Millisecond,
		Queues: map[string]skiplock.QueueConfig{"q": {MaxWorkers: 4}}}))
	waitFor(t, 60*time.Second, "another client to run the rest", func() bool { return s.succeeded() == 101 })
}
