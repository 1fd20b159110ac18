package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// unmarked counts queue's jobs that could become pending and are not marked grouped
// (migration 0022): jobs the limited claim's walk over jobs_group_ready_idx cannot
// find.
func unmarked(t *testing.T, ctx context.Context, s *Store, db DBTX, queue string) int {
	t.Helper()
	return unmarkedBy(t, ctx, s, db, "grouped", queue)
}

// unmarkedBy counts queue's jobs that could become pending and are not marked by
// column mark (grouped or fair_indexed).
func unmarkedBy(t *testing.T, ctx context.Context, s *Store, db DBTX, mark, queue string) (n int) {
	t.Helper()
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+`
WHERE queue = $1 AND NOT `+mark+` AND status <> 'succeeded'`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func insertPlain(t *testing.T, ctx context.Context, s *Store, db DBTX, queue, key string) string {
	t.Helper()
	r, err := s.Insert(ctx, db, nil, InsertParams{Queue: queue, Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3,
		ConcurrencyKey: key, Solo: true, ID: plainID()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func groupedOf(t *testing.T, ctx context.Context, s *Store, db DBTX, id string) bool {
	t.Helper()
	return markOf(t, ctx, s, db, "grouped", id)
}

// markOf is job id's column mark (grouped or fair_indexed).
func markOf(t *testing.T, ctx context.Context, s *Store, db DBTX, mark, id string) (m bool) {
	t.Helper()
	if err := db.QueryRow(ctx, `SELECT `+mark+` FROM `+s.Table("jobs")+` WHERE id = $1`, id).Scan(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGroupedFollowsLimits: a job enters jobs_group_ready_idx only when a limit may
// govern its queue (a limit of the queue's own, or any kind limit), through every
// insert statement; a limit that appears marks the jobs already there that can still
// become pending (a failed one through an operator's retry included).
func TestGroupedFollowsLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)

	plain := insertPlain(t, ctx, s, pool, "b", "")
	if groupedOf(t, ctx, s, pool, plain) {
		t.Fatal("a job of a queue no limit governs entered jobs_group_ready_idx")
	}
	dedup := "d1"
	keyed, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "b", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1, DedupKey: &dedup}, nil)
	if err != nil {
		t.Fatal(err)
	}
	many, err := s.InsertMany(ctx, pool, nil, []InsertParams{
		{Queue: "b", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1},
		{Queue: "c", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{keyed.ID, many[0].ID, many[1].ID} {
		if groupedOf(t, ctx, s, pool, id) {
			t.Fatalf("job %s of an unlimited queue entered jobs_group_ready_idx", id)
		}
	}
	// A failed job: an operator's retry can bring it back to pending, so the
	// limit's backfill marks it too.
	failed := insertPlain(t, ctx, s, pool, "b", "")
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET status = 'failed' WHERE id = $1`, failed); err != nil {
		t.Fatal(err)
	}

	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "b", Key: "*", MaxRunning: 2}, "c"); err != nil {
		t.Fatal(err)
	}
	if n := unmarked(t, ctx, s, pool, "b"); n != 0 {
		t.Fatalf("%d jobs of queue b stayed out of jobs_group_ready_idx after its limit was set", n)
	}
	if groupedOf(t, ctx, s, pool, many[1].ID) {
		t.Fatal("a limit of queue b marked a job of queue c")
	}
	if !groupedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "b", "")) {
		t.Fatal("a job of a limited queue stayed out of jobs_group_ready_idx")
	}
	if groupedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "c", "")) {
		t.Fatal("a job of queue c entered jobs_group_ready_idx for queue b's limit")
	}
	if _, err := s.AdminRetry(ctx, pool, nil, failed); err != nil {
		t.Fatal(err)
	}
	if !groupedOf(t, ctx, s, pool, failed) {
		t.Fatal("a retried job of a limited queue stayed out of jobs_group_ready_idx")
	}

	// A kind limit governs every queue.
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "kind", Target: "other", MaxRunning: 1}, "c"); err != nil {
		t.Fatal(err)
	}
	if n := unmarked(t, ctx, s, pool, "c"); n != 0 {
		t.Fatalf("%d jobs of queue c stayed out of jobs_group_ready_idx after a kind limit was set", n)
	}
	if !groupedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "x", "")) {
		t.Fatal("a job entered no jobs_group_ready_idx while a kind limit exists")
	}

	// No limit left: new jobs pay for no group index again.
	for _, l := range []LimitRow{{Scope: "kind", Target: "other"}, {Scope: "queue", Target: "b", Key: "*"}} {
		if ok, err := s.LimitDelete(ctx, pool, l.Scope, l.Target, l.Key, "c"); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	if groupedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "b", "")) {
		t.Fatal("a job entered jobs_group_ready_idx with no limit left")
	}
}

// TestGroupedInsertRacingALimit: an insert whose transaction is open while a limit
// of its queue is set — it marked its jobs with the previous body of job_grouped,
// and the limit's own backfill cannot see them — is waited for by LanesSettle, which
// marks them once it commits. A statement that planned before the change and runs
// after it is re-planned (the function's replacement invalidates its plan).
func TestGroupedInsertRacingALimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	raceLaneChange(t, ctx, s, pgtest.Pool(t), "grouped", func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "q", Key: "*", MaxRunning: 1}, "c")
		return err
	})
}

// raceLaneChange runs change (a LimitSet or FairSet that makes queue q limited or
// fair, so that its jobs must carry the column mark) while a transaction that inserts
// into q is open, and checks that the change waits for that transaction in its settle
// and that no job of q is left unmarked once it has returned. The racer inserts before
// the change and again after its new body committed: both jobs are unmarked inside the
// racer, which the change's own backfill cannot see. A connection whose insert had a
// generic plan cached before the change marks its next job under the new body. It
// returns the racer's two jobs; q then holds 11 pending jobs.
func raceLaneChange(t *testing.T, ctx context.Context, s *Store, pool *pgxpool.Pool, mark string,
	change func(context.Context, *pgxpool.Pool) error) (early, late string) {
	t.Helper()
	// A connection whose insert has a generic plan cached: PostgreSQL plans a
	// prepared statement anew for its first five executions.
	warm, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Release()
	for i := range 8 {
		insertPlain(t, ctx, s, warm.Conn(), "q", fmt.Sprint("w", i))
	}

	racer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer racer.Rollback(ctx)
	early = insertPlain(t, ctx, s, racer, "q", "r1")
	if markOf(t, ctx, s, racer, mark, early) {
		t.Fatalf("a job entered the index of %s before the change", mark)
	}

	set := make(chan error, 1)
	go func() { set <- change(ctx, pool) }()
	// The change has committed once the settle waits (for racer).
	waitForSettle(t, ctx, s, pool, set)

	if !markOf(t, ctx, s, warm.Conn(), mark, insertPlain(t, ctx, s, warm.Conn(), "q", "w9")) {
		t.Fatalf("an insert planned before the change, run after it, left its job unmarked (%s)", mark)
	}
	late = insertPlain(t, ctx, s, racer, "q", "r2")
	// What the racer wrote is invisible to the change's backfill: without the settle
	// these jobs would stay unmarked.
	var left int
	if err := racer.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE id IN ($1, $2) AND NOT `+mark, early, late).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatal("the racing transaction's jobs are marked already: the test does not exercise the settle")
	}
	select {
	case err := <-set:
		t.Fatalf("the change returned (%v) while a transaction that inserted unmarked jobs was open", err)
	default:
	}
	if err := racer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-set; err != nil {
		t.Fatal(err)
	}
	if n := unmarkedBy(t, ctx, s, pool, mark, "q"); n != 0 {
		t.Fatalf("%d jobs of queue q are unmarked (%s) after the change returned", n, mark)
	}
	return early, late
}

// waitForSettle returns once a backend runs s's lanes_settle and waits in it, failing
// if set (the result of LimitSet or FairSet) arrives first. It looks for the statement
// that names s's schema: the tests run in parallel in one database, and another
// test's settle is no sign that this one's change has committed.
func waitForSettle(t *testing.T, ctx context.Context, s *Store, pool *pgxpool.Pool, set chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND strpos(query, $1) > 0 AND pid <> pg_backend_pid()`,
			s.q+".lanes_settle()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-set:
			t.Fatalf("the change returned (%v) before a transaction that inserted unmarked jobs ended", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatal("the change never reached lanes_settle")
}

// TestGroupedConcurrentEnqueuesAndLimit: enqueuers on 8 connections while a limit of
// their queue appears; once LimitSet has returned and the enqueuers are done, every
// pending job is in jobs_group_ready_idx.
func TestGroupedConcurrentEnqueuesAndLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	var wg sync.WaitGroup
	started := make(chan struct{}, 8)
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			for j := range 150 {
				if j == 10 {
					started <- struct{}{}
				}
				if _, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1,
					ConcurrencyKey: fmt.Sprint(i), Solo: j%2 == 0}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 8 {
		<-started
	}
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "q", Key: "*", MaxRunning: 1}, "c"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := unmarked(t, ctx, s, pool, "q"); n != 0 {
		t.Fatalf("%d of 1,200 jobs enqueued while a limit appeared are out of jobs_group_ready_idx", n)
	}
}

// TestLimitedWalkFindsJobsEnqueuedBeforeTheLimit: jobs enqueued while their queue had
// no limit (outside jobs_group_ready_idx) are marked when a limit appears, so the
// limited claim's walk finds another key's job behind a saturated key's backlog.
func TestLimitedWalkFindsJobsEnqueuedBeforeTheLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	for range 40 {
		insertPlain(t, ctx, s, pool, "q", "a")
	}
	b := insertPlain(t, ctx, s, pool, "q", "b")
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "q", Key: "*", MaxRunning: 1}, "c"); err != nil {
		t.Fatal(err)
	}
	claim := func() []*Job {
		res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return res.Jobs
	}
	if got := claim(); len(got) != 1 || got[0].ConcurrencyKey != "a" {
		t.Fatalf("first claim took %v, want key a's first job", got)
	}
	if got := claim(); len(got) != 1 || got[0].ID != b {
		t.Fatalf("second claim took %v, want key b's job %s behind key a's saturated backlog", got, b)
	}
}

// TestLimitFiguresChangeSettlesNothing: new figures for a limit of a queue that was
// limited already leave job_grouped as it was, so LimitSet does not wait for the
// transactions writing to jobs (lanes_settle runs only after a change of the body).
func TestLimitFiguresChangeSettlesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "q", Key: "*", MaxRunning: 1}, "c"); err != nil {
		t.Fatal(err)
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if !groupedOf(t, ctx, s, open, insertPlain(t, ctx, s, open, "q", "")) {
		t.Fatal("a job of a limited queue stayed out of jobs_group_ready_idx")
	}
	// With the writer open, a settle would wait for it until the context ends.
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.LimitSet(short, pool, nil, LimitRow{Scope: "queue", Target: "q", Key: "*", MaxRunning: 5}, "c"); err != nil {
		t.Fatalf("changing a limit's figures waited for a writing transaction: %v", err)
	}
}
