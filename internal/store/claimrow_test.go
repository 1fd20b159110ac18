package store

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// The plain claim returns only the columns that differ between its jobs and fills in
// the others (status, worker, the lease's end, updated_at) from its parameters and
// its time (collectLeanClaimed): every job it returns must read exactly as the row it
// wrote, column by column, but for the output and history no claim returns. The jobs
// differ in every column the claim does return, come from two transactions, one of
// them was retried before (its last error and attempt count), and the lease has a
// fraction of a microsecond the server drops.
func TestClaimReturnsTheRowItWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, pgtest.Schema(t))
	pool := pgtest.Pool(t)
	jobs := s.Table("jobs")
	if _, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload, priority, deduplication_key, metadata, tags, concurrency_key, max_attempts)
VALUES ('a', '{"x":1}', 0, 'd1', '{"m":"v"}', '{t1,t2}', 'k1', 5), ('b', '[2]', 0, NULL, NULL, NULL, '', 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+jobs+` (kind, payload, priority) VALUES ('c', '"s"', 1)`); err != nil {
		t.Fatal(err)
	}
	lease := time.Minute + 1500*time.Nanosecond
	// Retry the priority-1 job once, so that it has a last error and an attempt.
	first, err := s.Claim(ctx, pool, nil, ClaimParams{Queue: "default", WorkerID: "w0", Limit: 1, Lease: lease})
	if err != nil || len(first) != 1 {
		t.Fatalf("claimed %d: %v", len(first), err)
	}
	if res, err := s.Finish(ctx, pool, nil, []Outcome{{Lease: Lease{ID: first[0].ID, Token: *first[0].LeaseToken}, Action: ActionRetry, Error: "boom"}}); err != nil || len(res) != 1 {
		t.Fatalf("retried %d: %v", len(res), err)
	}
	for _, now := range []*time.Time{nil, ptr(time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC))} {
		if now != nil {
			if _, err := pool.Exec(ctx, `UPDATE `+jobs+` SET status = 'pending', lease_until = NULL, lease_token = NULL, worker_id = NULL, run_at = now() - interval '1 minute'`); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Claim(ctx, pool, now, ClaimParams{Queue: "default", WorkerID: "worker-1", Limit: 10, Waiting: 1, Lease: lease})
		if err != nil || len(got) != 3 {
			t.Fatalf("claimed %d of 3: %v", len(got), err)
		}
		for _, j := range got {
			row, err := s.Get(ctx, pool, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			sameRow(t, j, row)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// sameRow fails t for every column of the jobs row want that the claimed job got
// reads otherwise (times compared as instants), but the output and the history, which
// claims leave out, and what only claims set.
func sameRow(t *testing.T, got, want *Job) {
	t.Helper()
	gv, wv := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for i := range gv.NumField() {
		name := gv.Type().Field(i).Name
		switch name {
		case "Output", "History", "Unblocks", "SlotOf", "SlotToken", "Rated":
			continue
		}
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if !sameValue(g, w) {
			t.Errorf("job %s: the claim returned %s %v, the row holds %v", want.ID, name, show(g), show(w))
		}
	}
}

func sameValue(g, w any) bool {
	switch g := g.(type) {
	case time.Time:
		return g.Equal(w.(time.Time))
	case *time.Time:
		w := w.(*time.Time)
		return (g == nil) == (w == nil) && (g == nil || g.Equal(*w))
	}
	return reflect.DeepEqual(g, w)
}

func show(v any) any {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		return rv.Elem().Interface()
	}
	return v
}
