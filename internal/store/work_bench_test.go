package store

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// BenchmarkWorkRound works a backlog of 50,000 jobs as W5's worker does, on one
// connection: claims of 700 resuming from the last one's cursor, each followed by the
// fenced completion of its jobs. Per job it reports the server's CPU time of the claims
// and of the completions (from the backend's /proc/PID/schedstat, when the server runs
// on this host), their WAL, and this process's CPU time (the Go side of the same
// statements: encoding, decoding and the collections they cause). On a shared machine
// these move far less with the others' load than the elapsed time; compare builds by
// them. One operation is one backlog worked out.
func BenchmarkWorkRound(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, pgtest.Schema(b))
	pool := pgtest.Pool(b)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		b.Fatal(err)
	}
	const backlog, size = 50000, 700
	wal := func() int64 {
		var lsn int64
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	var claimCPU, finishCPU, goCPU time.Duration
	var claimWAL, finishWAL int64
	jobs := 0
	outs := make([]Outcome, 0, size)
	for b.Loop() {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.Table("jobs")+` (kind, payload) SELECT 'noop', '{"n":1}' FROM generate_series(1, $1)`, backlog); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s.Table("jobs")); err != nil {
			b.Fatal(err)
		}
		_, _ = pool.Exec(ctx, "CHECKPOINT")
		b.StartTimer()
		var after *ClaimCursor
		for {
			c0, ok := backendCPU(pid)
			if !ok {
				b.Skip("the server's backends are not on this host")
			}
			g0 := processCPU()
			w0 := wal()
			got, err := s.Claim(ctx, conn, nil, ClaimParams{Queue: "default", WorkerID: "w", Limit: size, Lease: time.Minute, After: after, Waiting: size / 2})
			if err != nil {
				b.Fatal(err)
			}
			outs = outs[:0]
			for _, j := range got {
				outs = append(outs, Outcome{Lease: Lease{ID: j.ID, Token: *j.LeaseToken}, Action: ActionComplete})
			}
			c1, _ := backendCPU(pid)
			w1 := wal()
			if len(got) == 0 {
				break
			}
			after = CursorOf(got[len(got)-1])
			done, err := s.Finish(ctx, conn, nil, outs)
			if err != nil || len(done) != len(outs) {
				b.Fatalf("finished %d of %d: %v", len(done), len(outs), err)
			}
			g2 := processCPU()
			c2, _ := backendCPU(pid)
			w2 := wal()
			claimCPU += c1 - c0
			finishCPU += c2 - c1
			goCPU += g2 - g0
			claimWAL += w1 - w0
			finishWAL += w2 - w1
			jobs += len(got)
		}
		b.StopTimer()
		if _, err := pool.Exec(ctx, `DELETE FROM `+s.Table("jobs")); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	if jobs == 0 {
		b.Fatal("no jobs worked")
	}
	n := float64(jobs)
	b.ReportMetric(float64(claimCPU.Nanoseconds())/n/1000, "claim-server-µs/job")
	b.ReportMetric(float64(finishCPU.Nanoseconds())/n/1000, "finish-server-µs/job")
	b.ReportMetric(float64(goCPU.Nanoseconds())/n/1000, "go-µs/job")
	b.ReportMetric(float64(claimWAL)/n, "claim-WAL-B/job")
	b.ReportMetric(float64(finishWAL)/n, "finish-WAL-B/job")
	b.ReportMetric(0, "ns/op")
}

// processCPU is this process's CPU time so far (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
