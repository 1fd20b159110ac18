package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestConnectionError pins which failures of a harness statement on the Citus
// coordinator are tried again on a fresh session: the CI failure it was written
// for was a citus_rebalance_start whose cached connection to a restarted worker
// node had died (08006).
func TestConnectionError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "08006", Message: "cannot get the size because of a connection error"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "08001"}), true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("counting worker nodes: %w", &pgconn.ConnectError{}), true},
		{&pgconn.PgError{Code: "42P01"}, false},
		{&pgconn.PgError{Code: "55000", Message: "a rebalance is already running"}, false},
		{errors.New("something else"), false},
	} {
		if got := connectionError(c.err); got != c.want {
			t.Errorf("connectionError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestCancelOnTimeoutKeepsTheSession: a statement that outlives its context on the
// Citus producer's pool (cancelOnTimeout) is ended by a cancel request and its
// session goes back to the pool, where pgx's default closes the connection. Each
// session the producer lost cost a new coordinator backend and its connections to
// every worker node, which starved CI's Citus rounds.
func TestCancelOnTimeoutKeepsTheSession(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		opts  []func(*pgxpool.Config)
		keeps bool
	}{
		{"cancelOnTimeout", []func(*pgxpool.Config){cancelOnTimeout}, true},
		{"pgx's default", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, err := openPool(ctx, pgtest.URL(t), "chaos-cancel-test", 1, 5*time.Second, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			pid := func() int {
				t.Helper()
				var n int
				if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := pid()
			cut, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err = pool.Exec(cut, "SELECT pg_sleep(30)")
			cancel()
			if err == nil {
				t.Fatal("pg_sleep(30) returned within 100 ms")
			}
			if after := pid(); (after == before) != c.keeps {
				t.Fatalf("backend %d before the cut statement, %d after (%v): want the session kept = %v", before, after, err, c.keeps)
			}
		})
	}
}

// TestOpenProducerFloor: a Citus round whose producer committed under a quarter of
// what it offered fails (CI's rounds passed on 58 and 9 jobs); the other rounds'
// producer, which enqueues one transaction at a time, is not judged by it.
func TestOpenProducerFloor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	p := &producer{open: true, began: t0, ended: t0.Add(40 * time.Second), acked: make([]string, 399)}
	if c, o, short := p.floorShortfall(40); !short || c != 399 || o != 1600 {
		t.Fatalf("399 of 1,600: committed %d, offered %d, short %v; want short", c, o, short)
	}
	p.acked = append(p.acked, "one more")
	if _, _, short := p.floorShortfall(40); short {
		t.Fatal("400 of 1,600 is the floor itself, judged short")
	}
	p.open, p.acked = false, nil
	if _, _, short := p.floorShortfall(40); short {
		t.Fatal("a closed producer judged by the open producer's floor")
	}
}

// TestDrainStall: a drain gives up once nothing has moved for drainTimeout, not at a
// fixed time — CI's citus round was still working its 2,193 jobs down when a flat
// 90 s counted 736 of them as stuck — and in any case after drainCap.
func TestDrainStall(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	d := drainStall{last: t0}
	at := t0
	for open := int64(2000); open > 0; open -= 20 { // 20 a second for 100 s
		at = at.Add(time.Second)
		d.observe(open, at)
		if d.over(at, t0) {
			t.Fatalf("gave up at %s with %d open, still falling", at.Sub(t0), open)
		}
	}
	d.observe(20, at.Add(drainTimeout)) // no lower than before: no progress
	if !d.over(at.Add(drainTimeout+time.Second), t0) {
		t.Fatalf("still waiting after %s without progress", drainTimeout+time.Second)
	}
	moving := drainStall{last: t0}
	for i := 1; ; i++ { // one fewer every 10 s: moving, but past the cap
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		moving.observe(int64(100000-i), now)
		if moving.over(now, t0) {
			if now.Sub(t0) <= drainCap {
				t.Fatalf("gave up at %s, before the cap %s, while moving", now.Sub(t0), drainCap)
			}
			break
		}
	}
	if fresh := (drainStall{last: t0}); fresh.over(t0.Add(drainTimeout), t0) || !fresh.over(t0.Add(drainTimeout+time.Second), t0) {
		t.Fatal("a drain that never read its counts is judged by its start")
	}
}
