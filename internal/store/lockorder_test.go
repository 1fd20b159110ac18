package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The completions, which write several jobs from an array, lock them in id order,
// whatever order their caller listed them in (idOrder says why). The probe: the
// middle job (B of A < B < C) is held by another transaction and the statement is
// given C, A, B. Locking in id order, it holds A and waits for B, and has not touched
// C; in the given order it would hold C. A's row is moved after C's in the table
// first, so a plan that locks in the table's order (a hash join probed from the table)
// fails too. The table states of TestEveryStatementPlansBounded are run, since their plans
// differ. (The heartbeat and the reclaim never wait: TestHeartbeatAndReclaimSkipLockedJobs.)
func TestMultiRowWritesLockInIDOrder(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"new", "drained"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			multiRowWritesLockInIDOrder(t, state == "drained")
		})
	}
}

func multiRowWritesLockInIDOrder(t *testing.T, drained bool) {
	ctx := context.Background()
	s, pool := storeWithJobs(t, 0)
	if drained {
		drainStatistics(t, pool, s.Table("jobs"), insertJobsSQL(s))
	}
	for _, tc := range []struct {
		name string
		run  func(db DBTX, ls []Lease) error
	}{
		{"finish", func(db DBTX, ls []Lease) error {
			_, err := s.Finish(ctx, db, nil, outcomes(ls))
			return err
		}},
		{"finish_delete", func(db DBTX, ls []Lease) error {
			_, err := s.FinishDeleting(ctx, db, nil, outcomes(ls))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, lease := claimThree(t, s, pool, tc.name)
			// A new version of A's row, not a HOT one (updated_at is indexed), so the
			// primary key points at it: in the table's order A now comes after C.
			if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET updated_at = updated_at + interval '1 second' WHERE id = $1`, jobs[0].ID); err != nil {
				t.Fatal(err)
			}
			var aAfterC bool
			if err := pool.QueryRow(ctx, `SELECT (SELECT ctid FROM `+s.Table("jobs")+` WHERE id = $1) > (SELECT ctid FROM `+s.Table("jobs")+` WHERE id = $2)`,
				jobs[0].ID, jobs[2].ID).Scan(&aAfterC); err != nil || !aAfterC {
				t.Fatalf("A's row is not after C's in the table (%v, %v)", aAfterC, err)
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
			holder := lockRow(t, pool, s, jobs[1].ID)
			done, exited := make(chan error, 1), make(chan struct{})
			go func() {
				defer close(exited)
				done <- tc.run(conn, []Lease{lease(2), lease(0), lease(1)})
			}()
			// On failure, the statement ends with the holder's rollback before the
			// connection goes back to the pool.
			defer func() { holder.Rollback(ctx); <-exited }()
			waitLockWait(t, ctx, pool, pid, done)
			if !lockedElsewhere(t, ctx, pool, s, jobs[0].ID) {
				t.Fatal("the statement waits for B but does not hold A")
			}
			if lockedElsewhere(t, ctx, pool, s, jobs[2].ID) {
				t.Fatal("the statement holds C while it waits for B: it locks in the order it was given, not in id order")
			}
			if err := holder.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The heartbeat and the reclaim skip a job another transaction has locked instead of
// waiting for it: given C, A, B with B locked elsewhere, each returns at once having
// written A and C. The heartbeat reports B held but not renewed; the reclaim leaves
// it running, and reclaims it once the lock is gone.
func TestHeartbeatAndReclaimSkipLockedJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 0)
	leaseOf := func(id string) time.Time {
		var until time.Time
		if err := pool.QueryRow(ctx, `SELECT lease_until FROM `+s.Table("jobs")+` WHERE id = $1`, id).Scan(&until); err != nil {
			t.Fatal(err)
		}
		return until
	}

	t.Run("heartbeat", func(t *testing.T) {
		jobs, lease := claimThree(t, s, pool, "heartbeat")
		before := leaseOf(jobs[1].ID)
		holder := lockRow(t, pool, s, jobs[1].ID)
		defer holder.Rollback(ctx)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a wait for B would end here
		defer cancel()
		renewed, err := s.Heartbeat(tctx, pool, nil, []Lease{lease(2), lease(0), lease(1)}, time.Hour, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !renewed[jobs[0].ID] || !renewed[jobs[2].ID] {
			t.Errorf("A and C not renewed: %v", renewed)
		}
		if r, held := renewed[jobs[1].ID]; !held || r {
			t.Errorf("B (locked elsewhere): renewed %v, held %v; want held, not renewed", r, held)
		}
		holder.Rollback(ctx)
		if got := leaseOf(jobs[1].ID); !got.Equal(before) {
			t.Errorf("B's lease moved from %s to %s while it was locked", before, got)
		}
		if renewed, err := s.Heartbeat(ctx, pool, nil, []Lease{lease(1)}, time.Hour, nil); err != nil || !renewed[jobs[1].ID] {
			t.Errorf("B once unlocked: %v, %v; want renewed", renewed, err)
		}
	})

	t.Run("reclaim", func(t *testing.T) {
		jobs, lease := claimThree(t, s, pool, "reclaim")
		if _, err := pool.Exec(ctx, `UPDATE `+s.Table("jobs")+` SET lease_until = now() - interval '1 minute' WHERE queue = 'reclaim'`); err != nil {
			t.Fatal(err)
		}
		holder := lockRow(t, pool, s, jobs[1].ID)
		defer holder.Rollback(ctx)
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		delays := []time.Duration{time.Second, time.Second, time.Second}
		changed, err := s.Reclaim(tctx, pool, nil, []Lease{lease(2), lease(0), lease(1)}, delays)
		if err != nil {
			t.Fatal(err)
		}
		if len(changed) != 2 || changed[jobs[0].ID] != StatusPending || changed[jobs[2].ID] != StatusPending {
			t.Errorf("reclaimed %v; want A and C pending, B skipped", changed)
		}
		holder.Rollback(ctx)
		if changed, err := s.Reclaim(ctx, pool, nil, []Lease{lease(1)}, delays[:1]); err != nil || changed[jobs[1].ID] != StatusPending {
			t.Errorf("B once unlocked: %v, %v; want reclaimed", changed, err)
		}
	})
}

// claimThree claims the three jobs it enqueues into queue, sorted by id, and a Lease
// of each by index.
func claimThree(t *testing.T, s *Store, pool *pgxpool.Pool, queue string) ([]*Job, func(int) Lease) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, queue) SELECT 'k', '{}', $1 FROM generate_series(1, 3)`, queue); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: queue, WorkerID: "w", Limit: 3, Lease: time.Minute})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("claimed %d of 3: %v", len(jobs), err)
	}
	slices.SortFunc(jobs, func(a, b *Job) int { return strings.Compare(a.ID, b.ID) })
	return jobs, func(i int) Lease { return Lease{ID: jobs[i].ID, Token: *jobs[i].LeaseToken} }
}

// lockRow returns a transaction holding job id's row lock.
func lockRow(t *testing.T, pool *pgxpool.Pool, s *Store, id string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+s.Table("jobs")+` WHERE id = $1 FOR UPDATE`, id); err != nil {
		tx.Rollback(ctx)
		t.Fatal(err)
	}
	return tx
}

func outcomes(ls []Lease) []Outcome {
	outs := make([]Outcome, len(ls))
	for i, l := range ls {
		outs[i] = Outcome{Lease: l, Action: ActionComplete}
	}
	return outs
}

// waitLockWait waits until backend pid waits for a row lock, failing if the statement
// it runs ends first.
func waitLockWait(t *testing.T, ctx context.Context, pool *pgxpool.Pool, pid int, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the statement ended without waiting for the held row: %v", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the statement never waited for the held row")
		}
	}
}

// lockedElsewhere reports whether another transaction holds job id's row lock.
func lockedElsewhere(t *testing.T, ctx context.Context, pool *pgxpool.Pool, s *Store, id string) bool {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+s.Table("jobs")+` WHERE id = $1 FOR UPDATE NOWAIT`, id)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
