package store

import (
	"context"
	"testing"
	"time"
)

// A claim leases its jobs under one token of its own: the jobs of one claim share it,
// a later claim of the same job gets another, and the earlier token is fenced out
// (claimSet says why one per statement is enough).
func TestClaimTokenIsFreshPerClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 3)
	claim := func() []*Job {
		t.Helper()
		jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 10, Lease: time.Minute})
		if err != nil || len(jobs) != 3 {
			t.Fatalf("claimed %d jobs: %v", len(jobs), err)
		}
		return jobs
	}
	first := claim()
	for _, j := range first {
		if *j.LeaseToken != *first[0].LeaseToken {
			t.Fatalf("one claim gave tokens %s and %s", *first[0].LeaseToken, *j.LeaseToken)
		}
	}
	outs := make([]Outcome, len(first))
	for i, j := range first {
		outs[i] = Outcome{Lease: Lease{ID: j.ID, Token: *j.LeaseToken}, Action: ActionSnooze}
	}
	if res, err := s.Finish(ctx, pool, nil, outs); err != nil || len(res) != 3 {
		t.Fatalf("snoozed %d of 3: %v", len(res), err)
	}
	second := claim()
	if *second[0].LeaseToken == *first[0].LeaseToken {
		t.Fatalf("a second claim reused the first claim's token %s", *first[0].LeaseToken)
	}
	outs = []Outcome{{Lease: Lease{ID: second[0].ID, Token: *first[0].LeaseToken}, Action: ActionComplete}}
	if res, err := s.Finish(ctx, pool, nil, outs); err != nil || len(res) != 0 {
		t.Fatalf("the first claim's token finished a job of the second: %v, %v", res, err)
	}
}
