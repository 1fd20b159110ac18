package maint_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/maint"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/store"
)

// batchClock is the retention's injected clock: every batch reads it once (its
// statement's now), so each call marks a batch's start. At each call it records how
// many succeeded jobs are left, and it runs onCall (a test's hook) with the call's
// number.
type batchClock struct {
	t      *testing.T
	now    time.Time
	pool   *pgxpool.Pool
	table  string
	left   []int64
	onCall func(n int)
}

func (c *batchClock) Now() time.Time {
	var n int64
	if err := c.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+c.table+` WHERE status = 'succeeded'`).Scan(&n); err != nil {
		c.t.Error(err)
	}
	c.left = append(c.left, n)
	if c.onCall != nil {
		c.onCall(len(c.left))
	}
	return c.now
}

// retentionBacklog makes a schema holding backlog succeeded jobs past a one-minute
// retention (finished over the hour before t0, three at each microsecond, so that
// batches end inside a run of equal updated_at), young succeeded jobs within it and
// pending jobs, and a Retention over it keeping succeeded jobs one minute (the other
// states forever).
func retentionBacklog(t *testing.T, backlog, young, batch, maxBatches int) (*maint.Retention, *batchClock) {
	t.Helper()
	ctx := context.Background()
	s, err := store.New(pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	jobs := s.Table("jobs")
	if _, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload, status, attempts, updated_at)
SELECT 'k', '{}', 'succeeded', 1, $1::timestamptz - interval '1 hour' + (g / 3) * interval '1 microsecond'
FROM generate_series(0, $2 - 1) g`, t0, backlog); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload, status, attempts, updated_at)
SELECT 'k', '{}', 'succeeded', 1, $1::timestamptz - interval '10 seconds' FROM generate_series(1, $2)`, t0, young); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload) SELECT 'k', '{}' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	clock := &batchClock{t: t, now: t0, pool: pool, table: jobs}
	return &maint.Retention{Store: s, Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock,
		Settings: maint.RetentionSettings{Every: time.Minute, Windows: map[string]time.Duration{store.StatusSucceeded: time.Minute},
			BatchSize: batch, MaxBatches: maxBatches, PartitionLockTimeout: time.Second}}, clock
}

// A backlog of expired succeeded jobs is deleted in one run, in batches of at most
// BatchSize each, until a batch comes back short; the jobs within their window and
// the unfinished ones stay. The run reports itself caught up, and Observe hears it.
func TestRetentionCatchesUpInBoundedBatches(t *testing.T) {
	t.Parallel()
	const backlog, young, batch = 2500, 7, 100
	r, clock := retentionBacklog(t, backlog, young, batch, 1000)
	var observed atomic.Int64
	r.Observe = func(res maint.RetentionResult) { observed.Add(res.Succeeded) }
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != backlog || res.Incomplete || res.Backlogged() {
		t.Fatalf("run: %+v, want the %d expired jobs deleted and the run caught up", res, backlog)
	}
	if observed.Load() != backlog {
		t.Errorf("Observe heard %d deleted, want %d", observed.Load(), backlog)
	}
	// 25 full batches and the short one that ends the run.
	if want := backlog/batch + 1; len(clock.left) != want {
		t.Errorf("%d batches, want %d", len(clock.left), want)
	}
	clock.onCall = nil
	clock.Now() // what the last batch left
	for i := 1; i < len(clock.left); i++ {
		if d := clock.left[i-1] - clock.left[i]; d < 0 || d > batch {
			t.Errorf("batch %d deleted %d jobs, want at most %d", i, d, batch)
		}
	}
	if left := clock.left[len(clock.left)-1]; left != young {
		t.Errorf("%d succeeded jobs left, want the %d within their window", left, young)
	}
	var pending int64
	if err := r.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+r.Store.Table("jobs")+` WHERE status = 'pending'`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 5 {
		t.Errorf("%d pending jobs left, want 5", pending)
	}
}

// A run that reaches MaxBatches stops with the rest left and reports itself behind
// (Incomplete, Backlogged: the runner starts the next run at once); the next run
// finishes the backlog.
func TestRetentionBehindIsReported(t *testing.T) {
	t.Parallel()
	r, _ := retentionBacklog(t, 250, 0, 100, 2)
	var behind atomic.Int64
	r.Observe = func(res maint.RetentionResult) {
		if res.Incomplete {
			behind.Add(1)
		}
	}
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != 200 || !res.Incomplete || !res.Backlogged() {
		t.Fatalf("first run: %+v, want 200 deleted and the run behind", res)
	}
	res, err = r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != 50 || res.Incomplete || res.Backlogged() {
		t.Fatalf("second run: %+v, want the 50 left and the run caught up", res)
	}
	if behind.Load() != 1 {
		t.Errorf("Observe heard %d runs behind, want 1", behind.Load())
	}
}

// A run stops at the batch during which its context is cancelled: the batches before
// it committed, nothing after it ran, and the run returns the context's error.
func TestRetentionRunStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	r, clock := retentionBacklog(t, 1000, 0, 100, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock.onCall = func(n int) {
		if n == 4 {
			cancel()
		}
	}
	res, err := r.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v, want context.Canceled", err)
	}
	if res.Succeeded != 300 || len(clock.left) != 4 {
		t.Fatalf("deleted %d in %d batches, want 300 in the 3 batches before the cancel", res.Succeeded, len(clock.left))
	}
	clock.onCall = nil
	if clock.Now(); clock.left[len(clock.left)-1] != 700 {
		t.Fatalf("%d succeeded jobs left, want 700", clock.left[len(clock.left)-1])
	}
}

// backlogService is a service whose first run ends Backlogged: the runner must start
// the second at once, though its interval (after a first short one) is an hour.
type backlogService struct {
	calls, ran atomic.Int64
	runs       chan int64
}

type backlogResult bool

func (b backlogResult) LogAttrs() []any  { return nil }
func (b backlogResult) Backlogged() bool { return bool(b) }

func (s *backlogService) Name() string { return "backlog_test" }
func (s *backlogService) Interval() time.Duration {
	if s.calls.Add(1) == 1 {
		return time.Millisecond
	}
	return time.Hour
}
func (s *backlogService) RunOnce(context.Context, pgx.Tx) (maint.Result, error) {
	n := s.ran.Add(1)
	s.runs <- n
	return backlogResult(n == 1), nil
}

func TestRunnerRunsAgainAtOnceWhenBacklogged(t *testing.T) {
	t.Parallel()
	s, err := store.New(pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	var logged lockedBuffer
	runner := &maint.Runner{Store: s, Pool: pgtest.Pool(t), Log: slog.New(slog.NewTextHandler(&logged, nil))}
	svc := &backlogService{runs: make(chan int64, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); runner.Loop(ctx, svc) }()
	defer func() { cancel(); <-done }()
	for want := int64(1); want <= 2; want++ {
		select {
		case n := <-svc.runs:
			if n != want {
				t.Fatalf("run %d, want %d", n, want)
			}
		case <-time.After(time.Minute):
			t.Fatalf("run %d did not come: a backlogged run must be followed at once, not after the hour", want)
		}
	}
	// The warning was written before the second run began.
	if out := logged.String(); !strings.Contains(out, "maintenance is behind") || !strings.Contains(out, "service=backlog_test") {
		t.Errorf("no warning that the service is behind; log:\n%s", out)
	}
}

// lockedBuffer is a log's destination read by the test while the runner writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A run starts each state at its floor, a margin below the newest updated_at the
// previous run deleted: a job that landed below it (its completion committed long
// after its updated_at) is left to the next run from the oldest entry, every
// RetentionFullEvery-th run, while jobs above the floor go at once.
func TestRetentionRunsStartAtTheFloor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := retentionBacklog(t, 300, 0, 100, 1000)
	insert := func(at time.Time) {
		t.Helper()
		if _, err := r.Pool.Exec(ctx, `INSERT INTO `+r.Store.Table("jobs")+` (kind, payload, status, attempts, updated_at)
VALUES ('k', '{}', 'succeeded', 1, $1)`, at); err != nil {
			t.Fatal(err)
		}
	}
	run := func() int64 {
		t.Helper()
		res, err := r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res.Succeeded
	}
	if n := run(); n != 300 {
		t.Fatalf("first run (from the oldest entry): deleted %d, want 300", n)
	}
	insert(t0.Add(-2 * time.Hour))    // below the floor (about t0 - 1 h - the margin)
	insert(t0.Add(-30 * time.Minute)) // above it
	if n := run(); n != 1 {
		t.Fatalf("second run (from the floor): deleted %d, want only the job above the floor", n)
	}
	for i := 3; i <= maint.RetentionFullEvery; i++ {
		if n := run(); n != 0 {
			t.Fatalf("run %d (from the floor): deleted %d, want 0", i, n)
		}
	}
	if n := run(); n != 1 {
		t.Fatalf("run %d (from the oldest entry): deleted %d, want the job below the floor", maint.RetentionFullEvery+1, n)
	}
}
