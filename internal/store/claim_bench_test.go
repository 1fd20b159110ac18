package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkClaim times the plain claim of 1,000 jobs from the head of a queue of
// 50,000 (B1's claim, without the completion), in a transaction rolled back after
// each claim so that every claim meets the same table.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	if _, err := pool.Exec(ctx, insertJobsSQL(s), 50000); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.Table("jobs")); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		jobs, err := s.Claim(ctx, tx, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: 1000, Lease: time.Minute})
		_ = tx.Rollback(ctx)
		if err != nil || len(jobs) != 1000 {
			b.Fatalf("claimed %d: %v", len(jobs), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "µs/job")
}

// BenchmarkFairClaim times the fair claim of 1,000 jobs of a queue of 40,000 spread
// over 1, 100 and 10,000 keys, beside the plain claim of the same table (W12's shapes,
// without the completion), each in a transaction rolled back after the claim. Besides
// the time, it reports the server's CPU time per claim (server-ms/claim, from the
// backend's /proc/PID/schedstat when the server runs on this host): on a shared
// machine the CPU time moves far less with the others' load than the elapsed time, so
// compare that of fair and plain.
func BenchmarkFairClaim(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []int{1, 100, 10000} {
		s := newStore(b, pgtest.Schema(b))
		pool := pgtest.Pool(b)
		if _, err := s.FairSet(ctx, pool, nil, "default", true, nil, "c"); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload, concurrency_key)
SELECT 'k', '{}', 'key' || (g % $1::int) FROM generate_series(1, 40000) g`, keys); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.Table("jobs")); err != nil {
			b.Fatal(err)
		}
		for _, fair := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, map[bool]string{false: "plain", true: "fair"}[fair]), func(b *testing.B) {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Release()
				var pid int
				if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					b.Fatal(err)
				}
				cpu0, cpuOK := backendCPU(pid)
				p := ClaimParams{Queue: "default", WorkerID: "w", Limit: 1000, Lease: time.Minute}
				for b.Loop() {
					tx, err := conn.Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					var jobs []*Job
					if fair {
						var res FairClaim
						res, err = s.ClaimFair(ctx, tx, nil, p, false)
						jobs = res.Jobs
					} else {
						jobs, err = s.Claim(ctx, tx, nil, p)
					}
					_ = tx.Rollback(ctx)
					if err != nil || len(jobs) != 1000 {
						b.Fatalf("claimed %d: %v", len(jobs), err)
					}
				}
				if cpu1, ok := backendCPU(pid); ok && cpuOK {
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e6, "server-ms/claim")
				}
			})
		}
	}
}

// backendCPU is the CPU time a local server process has run for, from
// /proc/PID/schedstat (false where there is none).
func backendCPU(pid int) (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err == nil
}
