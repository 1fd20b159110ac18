package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// fairStore returns a store on a fresh schema whose queue "default" is fair.
func fairStore(t *testing.T, bypass *int) (*Store, *pgxpool.Pool) {
	t.Helper()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := s.FairSet(context.Background(), pool, nil, "default", true, bypass, "c"); err != nil {
		t.Fatal(err)
	}
	return s, pool
}

// addJobs inserts n due jobs of key into queue default, enqueued in order a second
// apart from an hour ago (at: seconds added), with priority prio.
func addJobs(t *testing.T, s *Store, pool *pgxpool.Pool, key string, n, prio, at int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO `+s.Table("jobs")+` (kind, payload, run_at, concurrency_key, priority)
SELECT 'k', jsonb_build_object('n', g), now() - interval '1 hour' + ($3 + g) * interval '1 second', $1, $4
FROM generate_series(1, $2) g`, key, n, at, prio); err != nil {
		t.Fatal(err)
	}
}

// fairClaim claims up to n jobs of queue default fairly (limited: the fair claim
// under limits) and returns them and whether the claim stopped for want of room:
// More, or, for a claim that took no job (which returns no row to say it), the
// rotation's record of it.
func fairClaim(t *testing.T, s *Store, pool *pgxpool.Pool, n int, limited bool) ([]*Job, bool) {
	t.Helper()
	res, err := s.ClaimFair(context.Background(), pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: n, Lease: time.Minute}, limited)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Weights) != len(res.Jobs) {
		t.Fatalf("%d weights for %d jobs", len(res.Weights), len(res.Jobs))
	}
	if len(res.Jobs) == 0 {
		if err := pool.QueryRow(context.Background(), `SELECT coalesce((SELECT more FROM `+s.Table("fair_rotation")+` WHERE queue = 'default'), false)`).Scan(&res.More); err != nil {
			t.Fatal(err)
		}
	}
	return res.Jobs, res.More
}

// keyCounts counts jobs by concurrency key, as "a=2 b=1" in key order.
func keyCounts(jobs []*Job) string {
	m := map[string]int{}
	var keys []string
	for _, j := range jobs {
		if m[j.ConcurrencyKey] == 0 {
			keys = append(keys, j.ConcurrencyKey)
		}
		m[j.ConcurrencyKey]++
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

// TestFairClaimTakesKeysInTurn: with one key's backlog enqueued first, claims of
// three take one job of each key in turn, and the rotation carries on where the last
// claim stopped, across claims (it is stored, not a client's memory).
func TestFairClaimTakesKeysInTurn(t *testing.T) {
	t.Parallel()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 100, 0, 0)
	addJobs(t, s, pool, "b", 2, 0, 200)
	addJobs(t, s, pool, "c", 2, 0, 200)
	addJobs(t, s, pool, "d", 2, 0, 200)
	var got []string
	for range 4 {
		jobs, more := fairClaim(t, s, pool, 2, false)
		if len(jobs) != 2 || !more {
			t.Fatalf("claim of 2 took %d (more %v), want 2 and more", len(jobs), more)
		}
		got = append(got, keyCounts(jobs))
	}
	// a b | c d | a b | c d
	want := []string{"a=1 b=1", "c=1 d=1", "a=1 b=1", "c=1 d=1"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("claims took %v, want %v", got, want)
	}
	// b, c and d are drained: a's backlog goes on alone, at full claims.
	jobs, _ := fairClaim(t, s, pool, 10, false)
	if keyCounts(jobs) != "a=10" {
		t.Fatalf("claim took %s, want a=10", keyCounts(jobs))
	}
}

// TestFairClaimSharesOneClaimRoundRobin: a claim larger than the number of keys gives
// each key its rounds: a key with few jobs leaves the rest of the claim to the others
// (the claim is work-conserving), and a weight of w takes w jobs per round.
func TestFairClaimSharesOneClaimRoundRobin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 100, 0, 0)
	addJobs(t, s, pool, "b", 100, 0, 200)
	addJobs(t, s, pool, "c", 1, 0, 400)
	jobs, _ := fairClaim(t, s, pool, 9, false)
	if got := keyCounts(jobs); got != "a=4 b=4 c=1" {
		t.Fatalf("claim of 9 took %s, want a=4 b=4 c=1", got)
	}
	// In the order chosen, which the engine runs them in: round by round.
	var order []string
	for _, j := range jobs {
		order = append(order, j.ConcurrencyKey)
	}
	if got := strings.Join(order, ""); got != "abcababab" {
		t.Fatalf("claim order %s, want abcababab", got)
	}
	if err := s.FairWeightSet(ctx, pool, nil, "default", "a", 3); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimFair(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 8, Lease: time.Minute}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := keyCounts(res.Jobs); got != "a=6 b=2" {
		t.Fatalf("claim of 8 with a weighing 3 took %s, want a=6 b=2", got)
	}
	// Each job comes with its key's weight: the engine's local turns use it.
	for i, j := range res.Jobs {
		if want := map[string]int{"a": 3, "b": 1}[j.ConcurrencyKey]; res.Weights[i] != want {
			t.Fatalf("job %d of key %s: weight %d, want %d", i, j.ConcurrencyKey, res.Weights[i], want)
		}
	}
	if ok, err := s.FairWeightDelete(ctx, pool, "default", "a"); err != nil || !ok {
		t.Fatalf("delete weight: %v %v", ok, err)
	}
	jobs, _ = fairClaim(t, s, pool, 8, false)
	if got := keyCounts(jobs); got != "a=4 b=4" {
		t.Fatalf("claim of 8 with equal weights took %s, want a=4 b=4", got)
	}
}

// TestFairClaimPriority: priority orders jobs within a key, not across keys; with a
// bypass priority, jobs at or above it go first whatever their key.
func TestFairClaimPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 5, 0, 0)
	addJobs(t, s, pool, "a", 1, 7, 100) // a's urgent job, enqueued last
	addJobs(t, s, pool, "b", 5, 9, 0)
	jobs, _ := fairClaim(t, s, pool, 2, false)
	if got := keyCounts(jobs); got != "a=1 b=1" {
		t.Fatalf("claim took %s, want one job of each key", got)
	}
	for _, j := range jobs {
		if j.ConcurrencyKey == "a" && j.Priority != 7 {
			t.Fatalf("a's first job has priority %d, want its priority 7 job first", j.Priority)
		}
	}
	// With bypass 9, b's priority-9 jobs all go first.
	nine := 9
	if _, err := s.FairSet(ctx, pool, nil, "default", true, &nine, "c"); err != nil {
		t.Fatal(err)
	}
	res, err := s.ClaimFair(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 4, Lease: time.Minute}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := keyCounts(res.Jobs); got != "b=4" {
		t.Fatalf("claim with bypass took %s, want b=4", got)
	}
	// The bypass lane's jobs come with weight 0: the engine runs them first, not by key.
	for i, w := range res.Weights {
		if w != 0 {
			t.Fatalf("bypass job %d: weight %d, want 0", i, w)
		}
	}
}

// TestFairClaimSkipsScheduledAndBlockedKeys: keys whose jobs are all scheduled for
// later, or wait in a sequence, take a place in the walk but cannot hold the rotation:
// each claim moves on past them, and reports More while it did not go round every key,
// so the producer claims again rather than sleeping.
func TestFairClaimSkipsScheduledAndBlockedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, run_at, concurrency_key)
SELECT 'k', '{}', now() + interval '1 hour', 'k' || g FROM generate_series(1, 6) g`); err != nil {
		t.Fatal(err)
	}
	// k7: a sequence whose first job is running (so its second waits), z: one due job.
	for _, row := range []string{
		`('k', '{}', 'k7', 'seq', 'running', now() + interval '1 hour', gen_random_uuid(), now() - interval '2 second')`,
		`('k', '{}', 'k7', 'seq', 'pending', NULL, NULL, now() - interval '1 second')`,
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key, sequence_key, status, lease_until, lease_token, run_at)
VALUES `+row); err != nil {
			t.Fatal(err)
		}
	}
	addJobs(t, s, pool, "z", 1, 0, 0)
	claims := 0
	for {
		claims++
		jobs, more := fairClaim(t, s, pool, 2, false)
		if len(jobs) == 1 {
			if jobs[0].ConcurrencyKey != "z" {
				t.Fatalf("took a job of %s", jobs[0].ConcurrencyKey)
			}
			break
		}
		if len(jobs) > 1 || !more || claims > 4 {
			t.Fatalf("claim %d took %d jobs, more %v: want nothing and more until z's turn", claims, len(jobs), more)
		}
	}
	if claims != 4 { // k1 k2 | k3 k4 | k5 k6 | k7 z
		t.Fatalf("z's job came at claim %d, want 4", claims)
	}
	jobs, more := fairClaim(t, s, pool, 2, false)
	if len(jobs) != 0 {
		t.Fatalf("took %d jobs, want none", len(jobs))
	}
	_ = more
}

// TestFairClaimPausedTakesNothing: a paused fair queue claims nothing, and its
// rotation stays where it was.
func TestFairClaimPausedTakesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 3, 0, 0)
	if _, err := s.QueuePause(ctx, pool, nil, "default"); err != nil {
		t.Fatal(err)
	}
	if jobs, more := fairClaim(t, s, pool, 2, false); len(jobs) != 0 || more {
		t.Fatalf("paused queue: took %d jobs, more %v", len(jobs), more)
	}
	if err := s.QueueResume(ctx, pool, nil, "default", "c"); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := fairClaim(t, s, pool, 2, false); len(jobs) != 2 {
		t.Fatalf("resumed queue: took %d jobs, want 2", len(jobs))
	}
}

// TestFairClaimUnderLimits: the fair claim of a queue a limit governs takes only what
// the limit admits, fair among the keys the limit leaves room for; the plain fair
// claim refuses a limited queue (a client whose view is stale), as the plain claim does.
func TestFairClaimUnderLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 50, 0, 0)
	addJobs(t, s, pool, "b", 50, 0, 100)
	addJobs(t, s, pool, "c", 50, 0, 200)
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "default", Key: "a", MaxRunning: 2}, "c"); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := fairClaim(t, s, pool, 9, false); len(jobs) != 0 {
		t.Fatalf("unlimited fair claim of a limited queue took %d jobs", len(jobs))
	}
	jobs, _ := fairClaim(t, s, pool, 9, true)
	if got := keyCounts(jobs); got != "a=2 b=3 c=3" && got != "a=2 b=4 c=3" && got != "a=2 b=3 c=4" {
		t.Fatalf("limited fair claim of 9 took %s, want a=2 and b, c fair", got)
	}
	jobs, _ = fairClaim(t, s, pool, 4, true)
	if got := keyCounts(jobs); got != "b=2 c=2" {
		t.Fatalf("limited fair claim of 4 took %s, want b=2 c=2 (a is full)", got)
	}
}

// TestFairClaimCostIgnoresOtherKeysBacklog is the fair claim's EXPLAIN test: the
// buffers a claim of one key's job touches do not grow with another key's backlog
// (20,000 jobs against 20), nor with keys that have no pending jobs (2,000 keys whose
// jobs all succeeded), and the jobs table is read only through indexes.
func TestFairClaimCostIgnoresOtherKeysBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	measure := func(backlog, idle int) float64 {
		s, pool := fairStore(t, nil)
		addJobs(t, s, pool, "a", backlog, 0, 0)
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key, status)
SELECT 'k', '{}', 'idle' || g, 'succeeded' FROM generate_series(1, $1) g`, idle); err != nil {
			t.Fatal(err)
		}
		addJobs(t, s, pool, "b", 1, 0, 0)
		if _, err := pool.Exec(ctx, "ANALYZE "+s.Table("jobs")); err != nil {
			t.Fatal(err)
		}
		// Rotate to a, so the measured claim starts at b and wraps to a.
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("fair_rotation")+` (queue, last_key) VALUES ('default', 'a')`); err != nil {
			t.Fatal(err)
		}
		var blocks float64
		written := 0
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, planGuardOn); err != nil {
			t.Fatal(err)
		}
		explainPlan(t, ctx, tx, func(n map[string]any) {
			if n["Relation Name"] == "jobs" || strings.HasPrefix(fmt.Sprint(n["Index Name"]), "jobs_") {
				if n["Node Type"] == "Seq Scan" || n["Node Type"] == "Bitmap Heap Scan" {
					t.Errorf("fair claim scans jobs: %v", n["Node Type"])
				}
				// The claim order of the whole queue is the express lane's only (none
				// here): a key's jobs are read from jobs_fair_idx, not filtered from it.
				if n["Index Name"] == "jobs_ready_idx" && n["Actual Rows"].(float64) > 0 {
					t.Errorf("fair claim reads %v jobs through jobs_ready_idx (%v)", n["Actual Rows"], n["Filter"])
				}
				blocks += nodeBlocks(n)
			}
			if n["Node Type"] == "ModifyTable" && n["Relation Name"] == "jobs" {
				written = int(n["Actual Rows"].(float64))
			}
		}, s.fair.claim.sql, nil, "default", "w", micros(time.Minute), 2, 2)
		if written != 2 {
			t.Fatalf("claim took %d jobs, want 2 (b's and a's)", written)
		}
		return blocks
	}
	small := measure(20, 0)
	large := measure(20000, 2000)
	t.Logf("buffers of jobs touched by a fair claim of 2: a backlog of 20 %.0f, of 20,000 with 2,000 idle keys %.0f", small, large)
	if large > 2*small {
		t.Fatalf("a claim touched %.0f buffers with a large backlog and idle keys, %.0f without: want about the same", large, small)
	}
}

// TestFairKeys: the per-key figures report the top keys by due jobs, each counted
// up to the cap, and the other keys summed in one row.
func TestFairKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 30, 0, 0)
	addJobs(t, s, pool, "b", 5, 0, 1000)
	addJobs(t, s, pool, "c", 2, 0, 2000)
	addJobs(t, s, pool, "d", 1, 0, 3000)
	keys, err := s.FairKeys(ctx, pool, nil, FairKeysParams{Queue: "default", Cap: 20, MaxKeys: 100, Top: 2})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range keys {
		name := "<other>"
		if k.Key != nil {
			name = *k.Key
		}
		got = append(got, fmt.Sprintf("%s:%d/%d", name, k.Keys, k.Due))
		if k.Oldest == nil || k.Now.Sub(*k.Oldest) < 10*time.Minute {
			t.Errorf("%s: oldest %v, now %v: want about an hour old", name, k.Oldest, k.Now)
		}
	}
	if want := "a:1/20 b:1/5 <other>:2/3"; strings.Join(got, " ") != want {
		t.Fatalf("fair keys: %s, want %s", strings.Join(got, " "), want)
	}
}

// TestFairClaimOrderRebuilt: the unlimited fair claim returns its jobs' keys' places
// in the walk and the engine's order is rebuilt from them (fairPlaces); the limited
// claim still returns each job's place from the statement. On the same table, with
// weights, the express lane, priorities within keys and a rotation to wrap, both
// return the same jobs in the same order and with the same weights.
func TestFairClaimOrderRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	five := 5
	s, pool := fairStore(t, &five)
	addJobs(t, s, pool, "a", 9, 0, 0)
	addJobs(t, s, pool, "a", 2, 3, 50) // a's urgent jobs, within its key
	addJobs(t, s, pool, "b", 9, 0, 10)
	addJobs(t, s, pool, "b", 2, 6, 60) // the express lane
	addJobs(t, s, pool, "c", 1, 0, 20)
	addJobs(t, s, pool, "d", 9, 0, 5)
	addJobs(t, s, pool, "e", 3, 0, 5)
	if err := s.FairWeightSet(ctx, pool, nil, "default", "b", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("fair_rotation")+` (queue, last_key) VALUES ('default', 'b')`); err != nil {
		t.Fatal(err)
	}
	claim := func(limited bool) (ids []string, weights []int) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		res, err := s.ClaimFair(ctx, tx, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 17, Lease: time.Minute}, limited)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			ids = append(ids, j.ConcurrencyKey+":"+j.ID)
		}
		return ids, res.Weights
	}
	ids, weights := claim(false)
	wantIDs, wantWeights := claim(true)
	if len(ids) != 17 {
		t.Fatalf("claimed %d jobs, want 17", len(ids))
	}
	if !slices.Equal(ids, wantIDs) || !slices.Equal(weights, wantWeights) {
		t.Fatalf("unlimited claim's order\n%v %v\nlimited claim's\n%v %v", ids, weights, wantIDs, wantWeights)
	}
}

// TestFairClaimFirstJobTakenElsewhere: the unlimited fair claim sends its walk with the
// row of its first job in fair order. When that job is taken between the claim's
// snapshot and its update (here by a transaction that held its row and set it
// running, as a plain claim of a client that has not heard of the queue's fairness
// would), the claim still returns the other jobs, each once, round by round: each key
// counted first in the walk and of weight 1 (fairOrderOf).
func TestFairClaimFirstJobTakenElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "a", 3, 0, 0)
	addJobs(t, s, pool, "b", 3, 0, 100)
	if err := s.FairWeightSet(ctx, pool, nil, "default", "b", 2); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{} // key:n → id, n in claim order
	rows, err := pool.Query(ctx, `SELECT concurrency_key, id::text, row_number() OVER (PARTITION BY concurrency_key ORDER BY run_at)
FROM `+s.Table("jobs")+` ORDER BY concurrency_key, run_at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, id string
		var n int
		if err := rows.Scan(&key, &id, &n); err != nil {
			t.Fatal(err)
		}
		ids[fmt.Sprintf("%s%d", key, n)] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The walk starts at a (no rotation yet): a's first job is first in fair order.
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET status = 'running', lease_token = gen_random_uuid(),
  lease_until = now() + interval '1 minute', attempts = attempts + 1 WHERE id = $1`, ids["a1"]); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res FairClaim
		err error
	}
	got := make(chan result, 1)
	done := make(chan error, 1)
	go func() {
		res, err := s.ClaimFair(ctx, conn, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 6, Lease: time.Minute}, false)
		got <- result{res, err}
		done <- err
	}()
	waitLockWait(t, ctx, pool, pid, done)
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	var order []string
	for _, j := range r.res.Jobs {
		for name, id := range ids {
			if id == j.ID {
				order = append(order, name)
			}
		}
	}
	// Without the walk: rounds of weight 1, each in claim order (a's jobs are older).
	if want := []string{"a2", "b1", "a3", "b2", "b3"}; !slices.Equal(order, want) {
		t.Fatalf("claimed %v, want %v", order, want)
	}
	if want := []int{1, 1, 1, 1, 1}; !slices.Equal(r.res.Weights, want) {
		t.Fatalf("weights %v, want %v", r.res.Weights, want)
	}
}
