package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// The fair index for fair queues only (migration 0024): a job enters jobs_fair_idx
// only when it is marked fair_indexed, which skiplock's inserts set for the jobs of
// fair queues. The fair claim reads a fair queue's jobs through that index only, so a
// job of a fair queue left unmarked would never be claimed: these tests check the
// marks, and that the fair claim drains every job.

// unfairIndexed counts queue's jobs that could become pending and are not marked
// fair_indexed: jobs the fair claim cannot find.
func unfairIndexed(t *testing.T, ctx context.Context, s *Store, db DBTX, queue string) int {
	t.Helper()
	return unmarkedBy(t, ctx, s, db, "fair_indexed", queue)
}

func fairIndexedOf(t *testing.T, ctx context.Context, s *Store, db DBTX, id string) bool {
	t.Helper()
	return markOf(t, ctx, s, db, "fair_indexed", id)
}

// drainFair claims queue's due jobs (at now, nil: the database's) with the fair claim
// until a claim takes none, and returns the ids it took.
func drainFair(t *testing.T, ctx context.Context, s *Store, db Batcher, now *time.Time, queue string) map[string]*Job {
	t.Helper()
	got := map[string]*Job{}
	for {
		res, err := s.ClaimFair(ctx, db, now, ClaimParams{Queue: queue, WorkerID: "w", Limit: 50, Lease: time.Hour}, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) == 0 {
			return got
		}
		for _, j := range res.Jobs {
			if got[j.ID] != nil {
				t.Fatalf("the fair claim took job %s twice", j.ID)
			}
			got[j.ID] = j
		}
	}
}

// pendingOf counts queue's pending jobs.
func pendingOf(t *testing.T, ctx context.Context, s *Store, db DBTX, queue string) (n int) {
	t.Helper()
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE queue = $1 AND status = 'pending'`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// unsettled reports whether queue is recorded as made fair and not settled since
// (queues.fair_unsettled).
func unsettled(t *testing.T, ctx context.Context, s *Store, db DBTX, queue string) (u bool) {
	t.Helper()
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.Table("queues")+` WHERE name = $1 AND fair_unsettled IS NOT NULL)`,
		queue).Scan(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

// heal runs the lane settler's statement (LanesHeal) in a transaction of its own.
func heal(t *testing.T, ctx context.Context, s *Store, pool *pgxpool.Pool) (ran bool, marked int64) {
	t.Helper()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		ran, marked, err = s.LanesHeal(ctx, tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ran, marked
}

// TestFairIndexedFollowsFairness: a job enters jobs_fair_idx only when its queue is
// fair, through every insert statement (COPY, which does not set the mark, leaves it
// in); a queue made fair marks the jobs already there that can still become pending —
// a running one retried, a failed one retried by an operator — and the fair claim
// then takes every one; a queue made plain again and fair once more marks the jobs
// enqueued in between.
func TestFairIndexedFollowsFairness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)

	plain := insertPlain(t, ctx, s, pool, "b", "k1")
	dedup := "d1"
	keyed, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "b", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &dedup,
		ConcurrencyKey: "k2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	many, err := s.InsertMany(ctx, pool, nil, []InsertParams{
		{Queue: "b", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, ConcurrencyKey: "k3"},
		{Queue: "c", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{plain, keyed.ID, many[0].ID, many[1].ID} {
		if fairIndexedOf(t, ctx, s, pool, id) {
			t.Fatalf("job %s of a plain queue entered jobs_fair_idx", id)
		}
	}
	// A COPY writes the marks CopyLaned read: b is plain yet, so its jobs stay out of
	// the index until b's backfill below marks them.
	ids := make([][16]byte, 3)
	ps := make([]InsertParams, len(ids))
	for i := range ids {
		ids[i] = [16]byte{0xff, byte(i), 1}
		ps[i] = InsertParams{Queue: "b", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, ConcurrencyKey: "k4"}
	}
	if _, _, err := s.CopyLaned(ctx, pool, []string{"b"}, nil, func(cp Copier, marks LaneMarks) error {
		return s.CopyInsert(ctx, cp, ids, ps, false, nil, marks)
	}); err != nil {
		t.Fatal(err)
	}
	if n := unmarkedBy(t, ctx, s, pool, "fair_indexed", "b"); n < len(ids) {
		t.Fatalf("%d jobs of plain queue b unmarked, want the %d COPY'd at least", n, len(ids))
	}

	// A job claimed while the queue is plain, retried after it became fair: back to
	// pending with the mark the queue's backfill gave it.
	running := insertPlain(t, ctx, s, pool, "b", "k5")
	claimed, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "b", WorkerID: "w", Limit: 100, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var lease Lease
	for _, j := range claimed {
		if j.ID == running {
			lease = Lease{ID: j.ID, Token: *j.LeaseToken}
			continue
		}
		// The others back to pending (a retry with no delay).
		if _, err := s.Finish(ctx, pool, nil, []Outcome{{Lease: Lease{ID: j.ID, Token: *j.LeaseToken}, Action: ActionRetry}}); err != nil {
			t.Fatal(err)
		}
	}
	if lease.ID == "" {
		t.Fatal("the plain claim did not take the job to run")
	}
	// A failed job: an operator's retry can bring it back to pending.
	failed := insertPlain(t, ctx, s, pool, "b", "k6")
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET status = 'failed' WHERE id = $1`, failed); err != nil {
		t.Fatal(err)
	}
	// A succeeded job stays as it was: it never becomes pending again.
	done := insertPlain(t, ctx, s, pool, "b", "k7")
	if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET status = 'succeeded' WHERE id = $1`, done); err != nil {
		t.Fatal(err)
	}
	if n := unfairIndexed(t, ctx, s, pool, "b"); n != 8 {
		t.Fatalf("%d jobs of plain queue b out of jobs_fair_idx, want 8 (3 COPY'd)", n)
	}

	if _, err := s.FairSet(ctx, pool, nil, "b", true, nil, "c"); err != nil {
		t.Fatal(err)
	}
	if n := unfairIndexed(t, ctx, s, pool, "b"); n != 0 {
		t.Fatalf("%d jobs of queue b stayed out of jobs_fair_idx after it was made fair", n)
	}
	if fairIndexedOf(t, ctx, s, pool, done) {
		t.Fatal("making queue b fair marked a succeeded job")
	}
	if fairIndexedOf(t, ctx, s, pool, many[1].ID) {
		t.Fatal("making queue b fair marked a job of queue c")
	}
	fresh := insertPlain(t, ctx, s, pool, "b", "k8")
	if !fairIndexedOf(t, ctx, s, pool, fresh) {
		t.Fatal("a job of a fair queue stayed out of jobs_fair_idx")
	}
	if fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "c", "")) {
		t.Fatal("a job of plain queue c entered jobs_fair_idx for queue b's fairness")
	}
	if _, err := s.Finish(ctx, pool, nil, []Outcome{{Lease: lease, Action: ActionRetry}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdminRetry(ctx, pool, nil, failed); err != nil {
		t.Fatal(err)
	}
	// Every pending job of b: the fair claim takes each one.
	want := pendingOf(t, ctx, s, pool, "b")
	got := drainFair(t, ctx, s, pool, nil, "b")
	if want != 9 || len(got) != want {
		t.Fatalf("the fair claim took %d of queue b's %d pending jobs (want 9)", len(got), want)
	}
	for _, id := range []string{running, failed, fresh, plain} {
		if got[id] == nil {
			t.Fatalf("the fair claim never took job %s", id)
		}
	}

	// Snoozed and retried back to pending in the fair queue: their marks stay, and
	// the fair claim takes them again once due.
	later := time.Now().Add(2 * time.Hour)
	var outs []Outcome
	i := 0
	for _, j := range got {
		a := ActionSnooze
		if i%2 == 0 {
			a = ActionRetry
		}
		i++
		outs = append(outs, Outcome{Lease: Lease{ID: j.ID, Token: *j.LeaseToken}, Action: a, Delay: time.Minute})
	}
	if _, err := s.Finish(ctx, pool, nil, outs); err != nil {
		t.Fatal(err)
	}
	if again := drainFair(t, ctx, s, pool, &later, "b"); len(again) != len(got) {
		t.Fatalf("the fair claim took %d of %d jobs retried or snoozed back to pending", len(again), len(got))
	}

	// Plain again: new jobs pay for no fair index; fair once more: they are marked.
	if _, err := s.FairSet(ctx, pool, nil, "b", false, nil, "c"); err != nil {
		t.Fatal(err)
	}
	between := insertPlain(t, ctx, s, pool, "b", "k9")
	if fairIndexedOf(t, ctx, s, pool, between) {
		t.Fatal("a job of a queue made plain again entered jobs_fair_idx")
	}
	if _, err := s.FairSet(ctx, pool, nil, "b", true, nil, "c"); err != nil {
		t.Fatal(err)
	}
	if got := drainFair(t, ctx, s, pool, nil, "b"); len(got) != 1 || got[between] == nil {
		t.Fatalf("the fair claim took %v of queue b made fair again, want its job enqueued while it was plain", got)
	}
}

// TestFairIndexedInsertRacingQueueSetFair: an insert whose transaction is open while
// its queue is made fair — it marked its jobs with the previous body of job_fair, and
// the queue's own backfill cannot see them — is waited for by the settle that
// FairSet runs after its commit, which marks them once it commits. Without the settle
// the fair claim would never take them. A statement planned before the change and
// run after it is re-planned.
func TestFairIndexedInsertRacingQueueSetFair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	early, late := raceLaneChange(t, ctx, s, pool, "fair_indexed", func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := s.FairSet(ctx, pool, nil, "q", true, nil, "c")
		return err
	})
	if unsettled(t, ctx, s, pool, "q") {
		t.Fatal("FairSet's settle left queue q recorded as unsettled")
	}
	got := drainFair(t, ctx, s, pool, nil, "q")
	if len(got) != 11 || got[early] == nil || got[late] == nil {
		t.Fatalf("the fair claim took %d jobs, want all 11 (the racer's %s and %s among them)", len(got), early, late)
	}
}

// TestFairIndexedConcurrentEnqueuesAndQueueSetFair: enqueuers on 8 connections while
// their queue is made fair; once FairSet has returned and the enqueuers are done,
// every pending job is in jobs_fair_idx and the fair claim takes all 1,200.
func TestFairIndexedConcurrentEnqueuesAndQueueSetFair(t *testing.T) {
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
				p := InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 1, ConcurrencyKey: fmt.Sprint(i), Solo: j%2 == 0}
				var err error
				if j%3 == 0 {
					_, err = s.InsertMany(ctx, pool, nil, []InsertParams{p}, nil)
				} else {
					_, err = s.Insert(ctx, pool, nil, p, nil)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 8 {
		<-started
	}
	if _, err := s.FairSet(ctx, pool, nil, "q", true, nil, "c"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := unfairIndexed(t, ctx, s, pool, "q"); n != 0 {
		t.Fatalf("%d of 1,200 jobs enqueued while their queue was made fair are out of jobs_fair_idx", n)
	}
	if got := drainFair(t, ctx, s, pool, nil, "q"); len(got) != 1200 {
		t.Fatalf("the fair claim took %d of 1,200 jobs", len(got))
	}
}

// TestFairIndexedBySQL: a queue made fair by plain SQL marks its backlog in the same
// transaction (the queues' triggers), but a job inserted racing that change stays
// out of jobs_fair_idx — the fair claim does not take it — until lanes_settle() runs
// after the commit, as docs/fairness.md says. A rename, a delete and a truncate of the
// queues table keep job_fair in step; a transaction above READ COMMITTED is refused.
func TestFairIndexedBySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	queues := s.Table("queues")
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	before := insertPlain(t, ctx, s, pool, "q", "a")
	racer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer racer.Rollback(ctx)
	raced := insertPlain(t, ctx, s, racer, "q", "b")
	exec(`INSERT INTO ` + queues + ` (name, fair) VALUES ('q', true)`)
	if !fairIndexedOf(t, ctx, s, pool, before) {
		t.Fatal("a queue made fair by SQL left its backlog out of jobs_fair_idx")
	}
	if err := racer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drainFair(t, ctx, s, pool, nil, "q"); len(got) != 1 || got[before] == nil {
		t.Fatalf("before the settle the fair claim took %d jobs, want only the backlog's (the racer's is not in the index yet)", len(got))
	}
	if !unsettled(t, ctx, s, pool, "q") {
		t.Fatal("a queue made fair by SQL is not recorded as unsettled")
	}
	// The lane settler's run (maint.LaneSettler, in every running client).
	if ran, marked := heal(t, ctx, s, pool); !ran || marked != 1 {
		t.Fatalf("the lane settler ran %v and marked %d jobs, want the racer's 1", ran, marked)
	}
	if unsettled(t, ctx, s, pool, "q") {
		t.Fatal("the settle left queue q recorded as unsettled")
	}
	if ran, _ := heal(t, ctx, s, pool); ran {
		t.Fatal("the lane settler settled again with every fair queue settled")
	}
	if got := drainFair(t, ctx, s, pool, nil, "q"); len(got) != 1 || got[raced] == nil {
		t.Fatalf("after the settle the fair claim took %v, want the racer's job %s", got, raced)
	}

	// A fair queue renamed: the new name is fair, the old one not.
	exec(`UPDATE ` + queues + ` SET name = 'r' WHERE name = 'q'`)
	if !fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "r", "")) {
		t.Fatal("a job of a fair queue renamed by SQL stayed out of jobs_fair_idx")
	}
	if fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "q", "")) {
		t.Fatal("a job of a queue's old name entered jobs_fair_idx")
	}
	// Pausing a fair queue changes nothing (no trigger fires).
	exec(`UPDATE ` + queues + ` SET paused_at = now() WHERE name = 'r'`)
	exec(`DELETE FROM ` + queues + ` WHERE name = 'r'`)
	if fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "r", "")) {
		t.Fatal("a job of a queue whose row was deleted entered jobs_fair_idx")
	}
	exec(`INSERT INTO ` + queues + ` (name, fair) VALUES ('t', true)`)
	exec(`TRUNCATE ` + queues)
	if fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "t", "")) {
		t.Fatal("a job of a queue truncated away entered jobs_fair_idx")
	}

	// Above READ COMMITTED: refused, nothing changed.
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+queues+` (name, fair) VALUES ('u', true)`)
		return err
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" {
		t.Fatalf("making a queue fair in a REPEATABLE READ transaction: %v, want feature_not_supported", err)
	}
	if fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "u", "")) {
		t.Fatal("a refused change made queue u fair")
	}
}

// TestFairBypassChangeSettlesNothing: a new bypass priority for a queue that was fair
// already leaves job_fair as it was, so FairSet does not wait for the transactions
// writing to jobs (lanes_settle runs only after a change of the body).
func TestFairBypassChangeSettlesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := s.FairSet(ctx, pool, nil, "q", true, nil, "c"); err != nil {
		t.Fatal(err)
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if !fairIndexedOf(t, ctx, s, open, insertPlain(t, ctx, s, open, "q", "")) {
		t.Fatal("a job of a fair queue stayed out of jobs_fair_idx")
	}
	// With the writer open, a settle would wait for it until the context ends.
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	five := 5
	if _, err := s.FairSet(short, pool, nil, "q", true, &five, "c"); err != nil {
		t.Fatalf("changing a fair queue's bypass priority waited for a writing transaction: %v", err)
	}
	if _, err := s.FairSet(short, pool, nil, "q", false, nil, "c"); err != nil {
		t.Fatalf("making a queue plain waited for a writing transaction: %v", err)
	}
}

// TestFairIndexKeptOnALargeTable: on a table of more than a million rows (as its
// statistics say) migration 0024 leaves jobs_fair_idx as it was, so that no write
// waits for an index build; the fair claim, which names the mark, still reads the
// queue's jobs through it — those enqueued before the migration, when every job was
// indexed, and after — and the statements the migration's notice prints swap in the
// narrow index without a job of a fair queue going missing.
func TestFairIndexKeptOnALargeTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	s := newStore(t, schema)
	exec(`CREATE SCHEMA ` + s.q)
	var fairLane migrate.Migration
	for _, m := range migrate.All() {
		if m.Version == 24 {
			fairLane = m
			break
		}
		exec(m.Render(schema))
	}
	exec(`INSERT INTO ` + s.Table("queues") + ` (name, fair) VALUES ('f', true)`)
	exec(`INSERT INTO ` + s.Table("jobs") + ` (queue, kind, payload, concurrency_key) SELECT q, 'k', '{}', 'k' || g FROM generate_series(1, 3) g, unnest('{f,p}'::text[]) q`)
	exec(`UPDATE pg_catalog.pg_class SET reltuples = 2000000 WHERE oid = '` + s.Table("jobs") + `'::regclass`)
	exec(`BEGIN; ` + fairLane.Render(schema) + `; COMMIT`)

	indexDef := func() (def string) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT pg_get_indexdef($1::regclass)`, s.q+".jobs_fair_idx").Scan(&def); err != nil {
			t.Fatal(err)
		}
		return def
	}
	if def := indexDef(); strings.Contains(def, "fair_indexed") {
		t.Fatalf("jobs_fair_idx rebuilt on a table of 2,000,000 rows: %s", def)
	}
	if fairIndexedOf(t, ctx, s, pool, insertPlain(t, ctx, s, pool, "p", "k9")) {
		t.Fatal("a job of a plain queue marked fair_indexed")
	}
	fresh := insertPlain(t, ctx, s, pool, "f", "k9")
	if !fairIndexedOf(t, ctx, s, pool, fresh) {
		t.Fatal("a job of a fair queue left unmarked")
	}
	// Under the plan guard, through the kept index.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, planGuardOn); err != nil {
		t.Fatal(err)
	}
	index := false
	explainPlan(t, ctx, tx, func(n map[string]any) {
		if n["Node Type"] == "Seq Scan" && n["Relation Name"] == "jobs" {
			t.Error("the fair claim scans jobs")
		}
		index = index || n["Index Name"] == "jobs_fair_idx"
	}, s.fair.claim.sql, nil, "f", "w", micros(time.Minute), 2, 2)
	tx.Rollback(ctx)
	if !index {
		t.Fatal("the fair claim does not read jobs_fair_idx as the migration left it")
	}
	if got := drainFair(t, ctx, s, pool, nil, "f"); len(got) != 4 || got[fresh] == nil {
		t.Fatalf("the fair claim took %d jobs through the kept index, want queue f's 4", len(got))
	}

	// The notice's statements, as printed.
	m := regexp.MustCompile(`outside a transaction\): (.*?) \(on the partitioned`).FindStringSubmatch(fairLane.Render(schema))
	if m == nil {
		t.Fatal("migration 0024 prints no swap of the index")
	}
	for _, st := range strings.Split(strings.ReplaceAll(m[1], "''", "'"), "; ") {
		exec(strings.TrimSuffix(st, ";"))
	}
	if def := indexDef(); !strings.Contains(def, "fair_indexed") {
		t.Fatalf("the notice's statements left jobs_fair_idx as %s", def)
	}
	later := insertPlain(t, ctx, s, pool, "f", "k1")
	if got := drainFair(t, ctx, s, pool, nil, "f"); len(got) != 1 || got[later] == nil {
		t.Fatalf("the fair claim took %d jobs through the swapped index, want the new one", len(got))
	}
}

// TestFairSettleLostIsHealed: the client that makes a queue fair stops waiting in its
// settle (its context ends; a process that stopped between its commit and its settle
// is the same) while a transaction that inserted a job racing the change is open. The
// queue is fair, that job is out of jobs_fair_idx once committed and the fair claim
// does not take it, and the queue stays recorded as unsettled: the lane settler's next
// run marks the job, and the fair claim takes it.
func TestFairSettleLostIsHealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	racer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer racer.Rollback(ctx)
	raced := insertPlain(t, ctx, s, racer, "q", "a")

	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	set := make(chan error, 1)
	go func() {
		_, err := s.FairSet(stop, pool, nil, "q", true, nil, "c")
		set <- err
	}()
	waitForSettle(t, ctx, s, pool, set)
	cancel()
	if err := <-set; err == nil {
		t.Fatal("FairSet returned no error after its settle was cancelled")
	}
	if err := racer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drainFair(t, ctx, s, pool, nil, "q"); len(got) != 0 {
		t.Fatalf("the fair claim took %d jobs before a settle: the test does not exercise the lane settler", len(got))
	}
	if !unsettled(t, ctx, s, pool, "q") {
		t.Fatal("a queue whose settle was cancelled is not recorded as unsettled")
	}
	if ran, marked := heal(t, ctx, s, pool); !ran || marked != 1 {
		t.Fatalf("the lane settler ran %v and marked %d jobs, want the racer's 1", ran, marked)
	}
	if got := drainFair(t, ctx, s, pool, nil, "q"); len(got) != 1 || got[raced] == nil {
		t.Fatalf("after the lane settler the fair claim took %v, want the racer's job %s", got, raced)
	}
}
