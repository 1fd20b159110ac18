package store

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestFinishCompleteWritesTheSameRow: a batch of completions goes through
// finish_complete, which must leave each row as finish's completion does (status,
// output, the lease cleared, worker, history and last error kept), stay fenced by the
// lease token, and leave a batch with any other outcome to finish.
func TestFinishCompleteWritesTheSameRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for _, retried := range []bool{false, true} {
		queue := "fresh"
		if retried {
			queue = "retried"
		}
		p := InsertParams{Queue: queue, Kind: "k", Payload: []byte(`{"a":1}`), MaxAttempts: 3, Metadata: []byte(`{"m":"x"}`), Tags: []string{"t"}}
		if _, err := s.InsertMany(ctx, pool, &now, []InsertParams{p, p}, nil); err != nil {
			t.Fatal(err)
		}
		claim := func() []*Job {
			t.Helper()
			jobs, err := s.Claim(ctx, pool, &now, ClaimParams{Queue: queue, WorkerID: "w1", Limit: 2, Lease: time.Minute})
			if err != nil || len(jobs) != 2 {
				t.Fatalf("claimed %d of 2: %v", len(jobs), err)
			}
			return jobs
		}
		jobs := claim()
		if retried {
			outs := []Outcome{
				{Lease: Lease{ID: jobs[0].ID, Token: *jobs[0].LeaseToken}, Action: ActionRetry, Error: "boom"},
				{Lease: Lease{ID: jobs[1].ID, Token: *jobs[1].LeaseToken}, Action: ActionRetry, Error: "boom"},
			}
			if done, err := s.Finish(ctx, pool, &now, outs); err != nil || len(done) != 2 || done[outs[0].Lease] != "pending" {
				t.Fatalf("retry: %v, %v", done, err)
			}
			jobs = claim()
		}
		later := now.Add(time.Second)
		out := func(j *Job, token string) Outcome {
			return Outcome{Lease: Lease{ID: j.ID, Token: token}, Action: ActionComplete, Output: []byte(`{"r":2}`)}
		}
		// A wrong token writes nothing, through finish_complete too.
		if done, err := s.Finish(ctx, pool, &later, []Outcome{out(jobs[1], "00000000-0000-0000-0000-000000000001")}); err != nil || len(done) != 0 {
			t.Fatalf("a completion under a wrong token: %v, %v", done, err)
		}
		if done, err := s.runFinishStmt(ctx, pool, &later, []Outcome{out(jobs[0], *jobs[0].LeaseToken)}, s.finish.finish); err != nil || len(done) != 1 || done[0] != StatusSucceeded {
			t.Fatalf("finish: %v, %v", done, err)
		}
		o := out(jobs[1], *jobs[1].LeaseToken)
		done, err := s.Finish(ctx, pool, &later, []Outcome{o})
		if err != nil || done[o.Lease] != "succeeded" {
			t.Fatalf("finish_complete: %v, %v", done, err)
		}
		var same bool
		var a, b string
		if err := pool.QueryRow(ctx, `SELECT x.r = y.r, x.r::text, y.r::text FROM
  (SELECT to_jsonb(j) - 'id' AS r FROM `+s.Table("jobs")+` j WHERE id = $1) x,
  (SELECT to_jsonb(j) - 'id' AS r FROM `+s.Table("jobs")+` j WHERE id = $2) y`, jobs[0].ID, jobs[1].ID).Scan(&same, &a, &b); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Errorf("%s: finish wrote\n%s\nfinish_complete\n%s", queue, a, b)
		}
	}

	// A batch with another outcome in it goes to finish: both outcomes are applied.
	p := InsertParams{Queue: "mixed", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3}
	if _, err := s.InsertMany(ctx, pool, &now, []InsertParams{p, p}, nil); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.Claim(ctx, pool, &now, ClaimParams{Queue: "mixed", WorkerID: "w1", Limit: 2, Lease: time.Minute})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d of 2: %v", len(jobs), err)
	}
	outs := []Outcome{
		{Lease: Lease{ID: jobs[0].ID, Token: *jobs[0].LeaseToken}, Action: ActionComplete},
		{Lease: Lease{ID: jobs[1].ID, Token: *jobs[1].LeaseToken}, Action: ActionFail, Error: "no"},
	}
	done, err := s.Finish(ctx, pool, &now, outs)
	if err != nil || done[outs[0].Lease] != "succeeded" || done[outs[1].Lease] != "failed" {
		t.Fatalf("a mixed batch: %v, %v", done, err)
	}
}
