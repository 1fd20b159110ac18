package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func newStore(tb testing.TB, schema string) *Store {
	tb.Helper()
	s, err := New(schema)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// insertJobsSQL inserts $1 pending jobs of kind k into s's jobs table.
func insertJobsSQL(s *Store) string {
	return `INSERT INTO ` + s.Table("jobs") + ` (kind, payload) SELECT 'k', '{}' FROM generate_series(1, $1)`
}

// storeWithJobs returns a store on a fresh schema holding n pending jobs of kind k,
// and the pool it is on.
func storeWithJobs(t *testing.T, n int) (*Store, *pgxpool.Pool) {
	t.Helper()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(context.Background(), insertJobsSQL(s), n); err != nil {
		t.Fatal(err)
	}
	return s, pool
}

func partition(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		if err := s.LockJobs(ctx, tx, time.Second); err != nil {
			return err
		}
		_, err := s.ConvertToPartitioned(ctx, tx, ConvertParams{Period: "day", Premake: 1,
			LegacyTo: UUIDv7Floor(time.Now().Add(24 * time.Hour))})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestInsertDeduplicationOnBothLayouts shows that the insert statements, which name
// no conflict target, keep the deduplication contract on the plain layout (the unique
// index) and on the partitioned one (job_dedup and its triggers): a second job with a
// held key inserts nothing and reports the holder, also within one batch, and the key
// is free again once its job is deleted.
func TestInsertDeduplicationOnBothLayouts(t *testing.T) {
	t.Parallel()
	for _, partitioned := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "partitioned"}[partitioned], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.Pool(t)
			s := newStore(t, pgtest.Schema(t))
			if partitioned {
				partition(t, s)
			}
			key := "k1"
			first, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &key}, nil)
			if err != nil || !first.Inserted {
				t.Fatalf("first insert: %+v %v", first, err)
			}
			again, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &key}, nil)
			if err != nil || again.Inserted || again.ID != first.ID {
				t.Fatalf("duplicate insert: %+v %v, want holder %s", again, err, first.ID)
			}
			other := "other-kind"
			k2 := "k2"
			many, err := s.InsertMany(ctx, pool, nil, []InsertParams{
				{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &key},
				{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &k2},
				{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &k2},
				{Queue: "q", Kind: other, Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &key},
				{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3},
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if many[0].Inserted || many[0].ID != first.ID || !many[1].Inserted || many[2].Inserted ||
				many[2].ID != many[1].ID || !many[3].Inserted || !many[4].Inserted {
				t.Fatalf("batch: %+v", many)
			}
			if _, err := s.AdminDelete(ctx, pool, first.ID); err != nil {
				t.Fatal(err)
			}
			free, err := s.Insert(ctx, pool, nil, InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &key}, nil)
			if err != nil || !free.Inserted {
				t.Fatalf("after deleting the holder the key is free: %+v %v", free, err)
			}
		})
	}
}

// TestPartitionedDedupConcurrentInsert: a second transaction inserting a key that an
// uncommitted one holds waits for it, then reports the duplicate — as a unique index
// makes it do.
func TestPartitionedDedupConcurrentInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	s := newStore(t, pgtest.Schema(t))
	partition(t, s)
	key := "race"
	p := InsertParams{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3, DedupKey: &key}
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	first, err := s.Insert(ctx, tx1, nil, p, nil)
	if err != nil || !first.Inserted {
		t.Fatalf("tx1: %+v %v", first, err)
	}
	var pid int32
	if err := tx1.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   InsertResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.Insert(ctx, pool, nil, p, nil)
		done <- result{r, err}
	}()
	// Wait until the second insert is blocked on tx1.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))", pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("second insert did not wait for the first: %+v %v", r.r, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("second insert never blocked")
		}
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.r.Inserted || r.r.ID != first.ID {
		t.Fatalf("second insert: %+v %v, want duplicate of %s", r.r, r.err, first.ID)
	}
}

func TestUUIDv7FloorMatchesSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	for _, ts := range []time.Time{
		time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 7, 13, 12, 34, 56, 789_000_000, time.UTC),
	} {
		var sqlFloor string
		var back time.Time
		var gen string
		err := pool.QueryRow(ctx, `SELECT "`+schema+`".uuid_v7_floor($1)::text, "`+schema+`".uuid_v7_time("`+schema+`".uuid_v7_floor($1)),
  "`+schema+`".uuid_v7($1)::text`, ts).Scan(&sqlFloor, &back, &gen)
		if err != nil {
			t.Fatal(err)
		}
		if got := UUIDv7Floor(ts); got != sqlFloor {
			t.Errorf("%s: Go floor %s, SQL floor %s", ts, got, sqlFloor)
		}
		if !back.Equal(ts) {
			t.Errorf("uuid_v7_time(floor(%s)) = %s", ts, back)
		}
		if gen < sqlFloor || gen >= UUIDv7Floor(ts.Add(time.Millisecond)) {
			t.Errorf("uuid_v7(%s) = %s lies outside [%s, next ms)", ts, gen, sqlFloor)
		}
		if tm, err := UUIDv7Time(gen); err != nil || !tm.Equal(ts) {
			t.Errorf("UUIDv7Time(%s) = %s %v", gen, tm, err)
		}
	}
}
