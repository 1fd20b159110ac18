package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
)

// chStatements are CH's statements, in the order each iteration runs them.
var chStatements = []string{"enqueue", "claim", "heartbeat", "finish"}

// chRun runs n iterations (after warm warm-up ones) of one job's life on e, one
// statement at a time on one connection, and returns each statement's latencies.
func chRun(ctx context.Context, e *Env, n, warm int) (map[string]*latencies, error) {
	schema, err := e.schema(ctx, "bench_ch")
	if err != nil {
		return nil, err
	}
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	pool, err := e.pool(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := st.Distributed(ctx, pool); err != nil { // learnt once, before the clock
		return nil, err
	}
	app, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, NotifyCoalesce: -1})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	lat := map[string]*latencies{}
	for _, s := range chStatements {
		lat[s] = &latencies{}
	}
	stop := e.progress("CH", n+warm, func() int64 { return int64(len(lat["finish"].d)) })
	defer stop()
	for i := 0; i < n+warm; i++ {
		key := e.key(i)
		if key == "" {
			key = "tenant-0"
		}
		timed := func(name string, f func() error) error {
			t := time.Now()
			if err := f(); err != nil {
				return fmt.Errorf("CH: %s of iteration %d: %w", name, i, err)
			}
			if i >= warm {
				lat[name].add(time.Since(t))
			}
			return nil
		}
		if err := timed("enqueue", func() error {
			_, err := app.Enqueue(ctx, noop{I: i}, &skiplock.EnqueueOpts{ConcurrencyKey: key})
			return err
		}); err != nil {
			return nil, err
		}
		var jobs []*store.Job
		p := store.ClaimParams{Queue: skiplock.DefaultQueue, WorkerID: "bench-ch", Limit: 1, Lease: time.Minute}
		if err := timed("claim", func() (err error) {
			if e.Citus {
				jobs, err = st.ClaimKey(ctx, pool, nil, p, key)
			} else {
				jobs, err = st.Claim(ctx, pool, nil, p)
			}
			if err == nil && len(jobs) != 1 {
				err = fmt.Errorf("claimed %d jobs, want 1", len(jobs))
			}
			return err
		}); err != nil {
			return nil, err
		}
		lease := store.Lease{ID: jobs[0].ID, Token: *jobs[0].LeaseToken, Key: jobs[0].ConcurrencyKey}
		if err := timed("heartbeat", func() error {
			m, err := st.Heartbeat(ctx, pool, nil, []store.Lease{lease}, time.Minute, []bool{true})
			if err == nil && !m[lease.ID] {
				err = errors.New("the lease was not renewed")
			}
			return err
		}); err != nil {
			return nil, err
		}
		if err := timed("finish", func() error {
			m, err := st.FinishDeleting(ctx, pool, nil, []store.Outcome{{Lease: lease, Action: store.ActionComplete}})
			if err == nil && m[lease] != "succeeded" {
				err = fmt.Errorf("finished as %q", m[lease])
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	var left int64
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs`).Scan(&left); err != nil {
		return nil, err
	}
	if left != 0 {
		return nil, fmt.Errorf("CH: %d jobs left after %d deleted on success", left, n+warm)
	}
	return lat, nil
}

// median and p99 of l in milliseconds.
func medP99(l *latencies) (float64, float64) {
	var r Result
	l.fill(&r)
	return r.P50ms, r.P99ms
}

func runCH(ctx context.Context, e *Env) (*Result, error) {
	plain, cl, err := e.plainAndClusterEnvs("CH")
	if err != nil {
		return nil, err
	}
	n, warm := e.n(2000), 50
	start := time.Now()
	// The plain node first, then the cluster, then the plain node again: the hop is
	// read against the mean of the two plain passes, so that a drift of the machine
	// over the run does not land on one side.
	var sides []map[string]*latencies
	for i, side := range []*Env{plain, cl, plain} {
		lat, err := isolatedValue(ctx, side, func() (map[string]*latencies, error) { return chRun(ctx, side, n, warm) })
		if err != nil {
			return nil, fmt.Errorf("CH: pass %d: %w", i+1, err)
		}
		sides = append(sides, lat)
	}
	settings, warn := settingsNote(ctx, plain, cl)
	r := &Result{Workload: "CH", N: n, Seconds: time.Since(start).Seconds(), Settings: cl.Settings + "; " + settings,
		Verified: fmt.Sprintf("ok: every job claimed, renewed and deleted on success, %d per pass (3 passes: plain, cluster, plain)", n+warm),
		Extra:    map[string]any{"measured": fmt.Sprintf("%d iterations (after %d of warm-up) of one job's life on one connection, one statement at a time; enqueue is Client.Enqueue, claim/heartbeat/finish the store's statements (the single node's, or the Citus layout's naming the key); finish deletes on success", n, warm)}}
	if warn != "" {
		r.Extra["warning"] = warn
	}
	var hopSum float64
	for _, s := range chStatements {
		p1, p1t := medP99(sides[0][s])
		c, ct := medP99(sides[1][s])
		p2, p2t := medP99(sides[2][s])
		pm, pt := (p1+p2)/2, (p1t+p2t)/2
		hopSum += c - pm
		r.Extra["hop_"+s] = fmt.Sprintf("median plain %.3f ms (passes %.3f, %.3f), cluster %.3f ms: hop %+.3f ms (%.2f×); p99 plain %.3f ms, cluster %.3f ms",
			pm, p1, p2, c, c-pm, c/max(pm, 1e-9), pt, ct)
	}
	r.Extra["hop_per_job"] = fmt.Sprintf("%+.3f ms of median latency per job's four statements", hopSum)
	cm, _ := medP99(sides[1]["claim"])
	r.P50ms = cm
	return r, nil
}
