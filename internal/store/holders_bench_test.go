package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkDedupConflict enqueues jobs whose deduplication keys are all held already
// (the idempotent re-enqueue of a key), one at a time and in batches of 100, against
// 50,000 holders: the cost of the conflict path, whose lookup of the holders probes
// the index once per key (enqueue.go, dedup_holders).
func BenchmarkDedupConflict(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	const holders = 50000
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, deduplication_key)
SELECT 'k', '{}', 'key-' || g FROM generate_series(1, $1) g`, holders); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+s.Table("jobs")); err != nil {
		b.Fatal(err)
	}
	params := func(from, n int) []InsertParams {
		ps := make([]InsertParams, n)
		for i := range ps {
			key := fmt.Sprintf("key-%d", 1+(from+i)%holders)
			ps[i] = InsertParams{Queue: "default", Kind: "k", Payload: []byte(`{}`), MaxAttempts: 8, DedupKey: &key}
		}
		return ps
	}
	b.Run("one", func(b *testing.B) {
		i := 0
		for b.Loop() {
			res, err := s.Insert(ctx, pool, nil, params(i*7919, 1)[0], nil)
			if err != nil || res.Inserted || res.ID == "" {
				b.Fatalf("%+v, %v; want the holder's id", res, err)
			}
			i++
		}
	})
	b.Run("batch100", func(b *testing.B) {
		i := 0
		for b.Loop() {
			res, err := s.InsertMany(ctx, pool, nil, params(i*7919, 100), nil)
			if err != nil || len(res) != 100 || res[99].Inserted || res[99].ID == "" {
				b.Fatalf("%d results, %v; want 100 holders' ids", len(res), err)
			}
			i++
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/100, "µs/job")
	})
}
