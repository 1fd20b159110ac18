package store

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// copyJobsOf COPYs n jobs of queue through cp with marks and returns their ids.
func copyJobsOf(t *testing.T, ctx context.Context, s *Store, cp Copier, marks LaneMarks, queue string, n int) []string {
	t.Helper()
	ids := make([][16]byte, n)
	ps := make([]InsertParams, n)
	out := make([]string, n)
	ms := uint64(time.Now().UnixMilli())
	for i := range ids {
		_, _ = rand.Read(ids[i][:])
		for k := range 6 { // the time prefix: the partitioned layout's bounds are on it
			ids[i][k] = byte(ms >> (40 - 8*k))
		}
		ids[i][6] = 0x70 | ids[i][6]&0x0f
		ids[i][8] = 0x80 | ids[i][8]&0x3f
		ps[i] = InsertParams{Queue: queue, Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3}
		out[i] = pgUUID(ids[i])
	}
	if err := s.CopyInsert(ctx, cp, ids, ps, false, nil, marks); err != nil {
		t.Fatal(err)
	}
	return out
}

func pgUUID(b [16]byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&0x0f])
	}
	return string(out)
}

// groupedCount counts the jobs among ids that are marked grouped.
func groupedCount(t *testing.T, ctx context.Context, s *Store, db DBTX, ids []string) (n int) {
	t.Helper()
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE id = ANY ($1::uuid[]) AND grouped`, ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCopyLanedMarks: a COPY writes the lane mark its queue's limits want, as the
// insert statements do — marked in a limited queue, unmarked in an unlimited one —
// on each kind of db CopyLaned takes: the pool (a transaction of its own), a
// connection outside a transaction (likewise), a connection inside one and a pgx.Tx
// (the caller's, which the COPY's jobs join); on both layouts.
func TestCopyLanedMarks(t *testing.T) {
	t.Parallel()
	for _, partitioned := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "partitioned"}[partitioned], func(t *testing.T) {
			t.Parallel()
			copyLanedMarks(t, partitioned)
		})
	}
}

func copyLanedMarks(t *testing.T, partitioned bool) {
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	if partitioned {
		partition(t, s)
	}
	pool := pgtest.Pool(t)
	if _, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: "lim", Key: "*", MaxRunning: 1}, "c"); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	check := func(name string, db Copier, wantOwned bool, commit func()) {
		t.Helper()
		var lim, free []string
		owned, notifyErr, err := s.CopyLaned(ctx, db, []string{"lim", "free"}, &Notify{Channel: "skiplock_test", Queues: []string{"lim"}},
			func(cp Copier, marks LaneMarks) error {
				if !marks["lim"].Grouped || marks["free"].Grouped || len(marks) != 2 {
					t.Errorf("%s: marks %v, want lim marked and free not", name, marks)
				}
				lim = copyJobsOf(t, ctx, s, cp, marks, "lim", 70)
				free = copyJobsOf(t, ctx, s, cp, marks, "free", 70)
				return nil
			})
		if err != nil || notifyErr != nil {
			t.Fatalf("%s: %v, %v", name, err, notifyErr)
		}
		if owned != wantOwned {
			t.Fatalf("%s: owned %v, want %v", name, owned, wantOwned)
		}
		if commit != nil {
			commit()
		}
		if n := groupedCount(t, ctx, s, pool, lim); n != len(lim) {
			t.Errorf("%s: %d of %d COPY'd jobs of the limited queue are marked", name, n, len(lim))
		}
		if n := groupedCount(t, ctx, s, pool, free); n != 0 {
			t.Errorf("%s: %d COPY'd jobs of an unlimited queue entered jobs_group_ready_idx", name, n)
		}
	}
	check("pool", pool, true, nil)
	check("idle conn", conn.Conn(), true, nil)
	if conn.Conn().PgConn().TxStatus() != 'I' {
		t.Fatal("the connection was left inside a transaction")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	check("pgx.Tx", tx, false, func() {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	check("conn in a transaction", conn.Conn(), false, func() {
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
	})

	// A COPY that fails rolls its own transaction back and leaves the connection
	// usable.
	_, _, err = s.CopyLaned(ctx, conn.Conn(), []string{"free"}, nil, func(cp Copier, marks LaneMarks) error {
		return s.CopyInsert(ctx, cp, make([][16]byte, 2), []InsertParams{
			{Queue: "free", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3},
			{Queue: "free", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 3}}, false, nil, marks)
	})
	if err == nil {
		t.Fatal("a COPY of two jobs with the same id succeeded")
	}
	if conn.Conn().PgConn().TxStatus() != 'I' {
		t.Fatal("a failed COPY left its transaction open")
	}
}

// TestCopyRacingALaneChange: a COPY whose marks were read before a limit of its
// queue, or the queue's fairness, committed does not strand its jobs out of the index
// the change wants them in (jobs_group_ready_idx, jobs_fair_idx: a fair job out of
// the latter is invisible to the fair claim). The change is made between the read
// and the COPY itself (inside write): LimitSet / FairSet must wait for the COPY's
// transaction — which holds ROW EXCLUSIVE on jobs since before its read — and mark
// its jobs once it has committed. Reading the marks before taking the lock, the
// change would return while the COPY was still to write its unmarked jobs (the settle
// waits only for transactions that hold the lock when it starts). Run for the pool
// (CopyLaned's own transaction) and a pgx.Tx (the caller's).
func TestCopyRacingALaneChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	changes := []struct {
		name, mark string
		of         func(Lanes) bool
		change     func(queue string) error
	}{
		{"limit", "grouped", func(l Lanes) bool { return l.Grouped }, func(queue string) error {
			_, err := s.LimitSet(ctx, pool, nil, LimitRow{Scope: "queue", Target: queue, Key: "*", MaxRunning: 1}, "c")
			return err
		}},
		{"fair", "fair_indexed", func(l Lanes) bool { return l.FairIndexed }, func(queue string) error {
			_, err := s.FairSet(ctx, pool, nil, queue, true, nil, "c")
			return err
		}},
	}
	for _, ch := range changes {
		for _, c := range []struct{ name, queue string }{{"pool", ch.name + "-qp"}, {"pgx.Tx", ch.name + "-qt"}} {
			name := ch.name + ", " + c.name
			var db Copier = pool
			var tx pgx.Tx
			if c.name == "pgx.Tx" {
				var err error
				if tx, err = pool.Begin(ctx); err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				db = tx
			}
			set := make(chan error, 1)
			var ids []string
			_, _, err := s.CopyLaned(ctx, db, []string{c.queue}, nil, func(cp Copier, marks LaneMarks) error {
				if ch.of(marks[c.queue]) {
					t.Fatalf("%s: queue %s marked before the change", name, c.queue)
				}
				go func() { set <- ch.change(c.queue) }()
				// The change has committed once the settle waits (for this transaction).
				waitForSettle(t, ctx, s, pool, set)
				ids = copyJobsOf(t, ctx, s, cp, marks, c.queue, 100)
				var left int
				if err := cp.(DBTX).QueryRow(ctx, `SELECT count(*) FROM `+s.Table("jobs")+` WHERE id = ANY ($1::uuid[]) AND NOT `+ch.mark, ids).Scan(&left); err != nil {
					t.Fatal(err)
				}
				if left != len(ids) {
					t.Fatalf("%s: %d of %d jobs unmarked before the commit: the test does not exercise the settle", name, left, len(ids))
				}
				select {
				case err := <-set:
					t.Fatalf("%s: the change returned (%v) while a COPY that read the old marks was open", name, err)
				default:
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tx != nil {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-set; err != nil {
				t.Fatal(err)
			}
			if n := unmarkedBy(t, ctx, s, pool, ch.mark, c.queue); n != 0 {
				t.Fatalf("%s: %d COPY'd jobs of queue %s are unmarked (%s) after the change returned", name, n, c.queue, ch.mark)
			}
			// The next COPY reads the new marks.
			var later []string
			if _, _, err := s.CopyLaned(ctx, pool, []string{c.queue}, nil, func(cp Copier, marks LaneMarks) error {
				later = copyJobsOf(t, ctx, s, cp, marks, c.queue, 70)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if n := unmarkedBy(t, ctx, s, pool, ch.mark, c.queue); n != 0 {
				t.Fatalf("%s: a COPY after the change left %d of %d jobs unmarked (%s)", name, n, len(later), ch.mark)
			}
		}
	}
}
