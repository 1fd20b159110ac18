package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Every statement that writes several jobs from an array locks them in id order,
// whatever order its caller listed them in (idOrder says why). The probe: the middle
// job (B of A < B < C) is held by another transaction and the statement is given
// C, A, B. Locking in id order, it holds A and waits for B, and has not touched C;
// in the given order it would hold C.
func TestMultiRowWritesLockInIDOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, pool := storeWithJobs(t, 0)
	expire := `UPDATE ` + s.Table("jobs") + ` SET lease_until = now() - interval '1 minute'`
	for _, tc := range []struct {
		name   string
		expire bool // the statement wants expired leases
		run    func(db DBTX, ls []Lease) error
	}{
		{"heartbeat", false, func(db DBTX, ls []Lease) error {
			_, err := s.Heartbeat(ctx, db, nil, ls, time.Minute)
			return err
		}},
		{"finish", false, func(db DBTX, ls []Lease) error {
			_, err := s.Finish(ctx, db, nil, outcomes(ls))
			return err
		}},
		{"finish_delete", false, func(db DBTX, ls []Lease) error {
			_, err := s.FinishDeleting(ctx, db, nil, outcomes(ls))
			return err
		}},
		{"reclaim", true, func(db DBTX, ls []Lease) error {
			_, err := s.Reclaim(ctx, db, nil, ls, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, queue) SELECT 'k', '{}', $1 FROM generate_series(1, 3)`, tc.name); err != nil {
				t.Fatal(err)
			}
			jobs, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: tc.name, WorkerID: "w", Limit: 3, Lease: time.Minute})
			if err != nil || len(jobs) != 3 {
				t.Fatalf("claimed %d of 3: %v", len(jobs), err)
			}
			slices.SortFunc(jobs, func(a, b *Job) int { return strings.Compare(a.ID, b.ID) })
			lease := func(i int) Lease { return Lease{ID: jobs[i].ID, Token: *jobs[i].LeaseToken} }
			if tc.expire {
				if _, err := pool.Exec(ctx, expire+` WHERE queue = $1`, tc.name); err != nil {
					t.Fatal(err)
				}
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
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(ctx)
			if _, err := holder.Exec(ctx, `SELECT 1 FROM `+s.Table("jobs")+` WHERE id = $1 FOR UPDATE`, jobs[1].ID); err != nil {
				t.Fatal(err)
			}
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
