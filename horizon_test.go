package skiplock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// Stats name the session that holds the vacuum horizon, and count the dead tuples
// it keeps in jobs. The test has a database of its own: the horizon is the
// database's, and the other tests' transactions would be older than its pin.
func TestStatsNameWhatHoldsTheVacuumHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := pgtest.MigratedDatabase(t, skiplock.DefaultSchema)
	c, err := skiplock.NewClient(pool, skiplock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	s, err := c.Stats(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Horizon.Holder != "" {
		t.Fatalf("nothing else is open, Stats report %+v", s.Horizon)
	}

	pid, release := pgtest.HoldHorizon(t, url)
	// Five jobs enqueued, then deleted after the pin began: their tuples are dead,
	// and the pin keeps vacuum from removing them.
	for range 5 {
		if _, err := c.Enqueue(ctx, hzArgs{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The DELETE's counts reach PostgreSQL's statistics at its session's next flush
	// (at most once a second); pg_stat_force_next_flush makes that the next idle moment.
	if _, err := conn2(t, pool, "DELETE FROM skiplock.jobs", "SELECT pg_stat_force_next_flush()", "VACUUM skiplock.jobs"); err != nil {
		t.Fatal(err)
	}
	s, err = c.Stats(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Horizon
	if h.Holder != skiplock.HolderSession || h.PID != pid || h.State != "idle in transaction" ||
		!h.HeldForKnown || h.HeldFor <= 0 || h.XIDAge < 5 || h.DeadJobTuples < 5 {
		t.Fatalf("with session %d pinned and 5 jobs deleted, Stats report %+v; want that session, idle in transaction, "+
			"its time known, 5 or more xids behind, at least 5 dead tuples", pid, h)
	}
	release()
	if s, err = c.Stats(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if s.Horizon.Holder != "" {
		t.Fatalf("the pin ended, Stats report %+v", s.Horizon)
	}
}

// conn2 runs statements one after another on one connection of pool.
func conn2(t *testing.T, pool *pgxpool.Pool, stmts ...string) (int, error) {
	t.Helper()
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	for i, st := range stmts {
		if _, err := c.Exec(ctx, st); err != nil {
			return i, err
		}
	}
	return len(stmts), nil
}

type hzArgs struct{}

func (hzArgs) Kind() string { return "hz" }

func TestHorizonStatsString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		h    skiplock.HorizonStats
		want string
	}{
		{skiplock.HorizonStats{}, "no other transaction open"},
		{skiplock.HorizonStats{Holder: skiplock.HolderSession, PID: 4711, Name: "psql", State: "idle in transaction",
			XIDAge: 250118, HeldFor: 12*time.Minute + 3*time.Second + 400*time.Millisecond, HeldForKnown: true},
			"session 4711 (psql, idle in transaction), open 12m3s, 250118 transactions behind"},
		{skiplock.HorizonStats{Holder: skiplock.HolderSession, PID: 4711, XIDAge: 9},
			"session 4711, 9 transactions behind"},
		{skiplock.HorizonStats{Holder: skiplock.HolderPreparedTransaction, Name: "tx-1", XIDAge: 5, HeldFor: time.Hour, HeldForKnown: true},
			`prepared transaction "tx-1", open 1h0m0s, 5 transactions behind`},
		{skiplock.HorizonStats{Holder: skiplock.HolderReplicationSlot, Name: "standby", State: "inactive", XIDAge: 7},
			`replication slot "standby" (inactive), 7 transactions behind`},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.h, got, c.want)
		}
	}
}
