package store

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"
)

// TestFairClaimBoundSequential drives one fair queue through random claims, one at a
// time, of random sizes, while light keys enqueue single jobs at random moments
// beside one hot key's backlog. Claims in a row are what the queue's lock makes of
// any number of clients' claims, so this is the rotation's bound without timing: once
// a light job is committed, the claims that take hot jobs before it is claimed number
// at most one more than the turns its own key had meanwhile.
func TestFairClaimBoundSequential(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "hot", 3000, 0, 0)
	rng := mrand.New(mrand.NewPCG(45, 5))
	type waiting struct {
		key      string
		hot, own int // claims of the hot key, and of its own key, since it was enqueued
		enqueued int
	}
	pending := map[string]*waiting{} // by job id
	worst, judged := 0, 0
	var worstAt string
	for step := range 600 {
		if rng.IntN(3) == 0 {
			for range 1 + rng.IntN(4) {
				key := fmt.Sprintf("light%02d", 1+rng.IntN(10))
				var id string
				if err := pool.QueryRow(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key) VALUES ('k', '{}', $1) RETURNING id::text`, key).Scan(&id); err != nil {
					t.Fatal(err)
				}
				pending[id] = &waiting{key: key, enqueued: step}
			}
		}
		n := 1 + rng.IntN(10)
		jobs, _ := fairClaim(t, s, pool, n, false)
		keys := map[string]bool{}
		for _, j := range jobs {
			keys[j.ConcurrencyKey] = true
		}
		for _, j := range jobs {
			if w, ok := pending[j.ID]; ok {
				judged++
				if over := w.hot - w.own; over > worst {
					worst, worstAt = over, fmt.Sprintf("job of %s enqueued at step %d, claimed at step %d", w.key, w.enqueued, step)
				}
				delete(pending, j.ID)
			}
		}
		for _, w := range pending {
			if keys["hot"] {
				w.hot++
			}
			if keys[w.key] {
				w.own++
			}
		}
	}
	t.Logf("%d light jobs judged, worst %d claims of the hot key beyond their key's turns (%s)", judged, worst, worstAt)
	if worst > 1 {
		t.Fatalf("a light job waited %d claims of the hot key beyond its key's turns, want at most 1 (%s)", worst, worstAt)
	}
}

// TestPlainClaimsLeaveFairQueues: a client that has not heard that a queue was made
// fair (its listener connected after the NOTIFY) still runs the plain claim, or the
// limited one; either takes nothing from the fair queue, so no job leaves it outside
// the rotation, and both take jobs again once the queue is plain. Without plainOpen
// the plain claim took the backlog's oldest jobs — the hot key's — in plain order,
// which is how the chaos fair round saw light jobs wait four claims of the hot key.
func TestPlainClaimsLeaveFairQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := fairStore(t, nil)
	addJobs(t, s, pool, "hot", 20, 0, 0)
	addJobs(t, s, pool, "light", 1, 0, 100)
	plain := func() int {
		jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 4, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs)
	}
	limited := func() int {
		res, err := s.ClaimLimited(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 4, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Jobs)
	}
	if n := plain(); n != 0 {
		t.Fatalf("the plain claim took %d jobs of a fair queue, want 0", n)
	}
	if n := limited(); n != 0 {
		t.Fatalf("the limited claim took %d jobs of a fair queue, want 0", n)
	}
	// The fair claim takes the light key's job at its first turn.
	jobs, _ := fairClaim(t, s, pool, 2, false)
	if got := keyCounts(jobs); got != "hot=1 light=1" {
		t.Fatalf("the fair claim took %s, want hot=1 light=1", got)
	}
	if _, err := s.FairSet(ctx, pool, nil, "default", false, nil, "c"); err != nil {
		t.Fatal(err)
	}
	if n := plain(); n != 4 {
		t.Fatalf("the plain claim took %d jobs once the queue was plain, want 4", n)
	}
	if n := limited(); n != 4 {
		t.Fatalf("the limited claim took %d jobs once the queue was plain, want 4", n)
	}
}
