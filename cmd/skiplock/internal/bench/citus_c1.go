package bench

import (
	"context"
	"fmt"
	"time"
)

// c1Pair is one workload on both sides.
type c1Pair struct {
	name           string
	plain, cluster *Result
}

func runC1(ctx context.Context, e *Env) (*Result, error) {
	plain, cl, err := e.plainAndClusterEnvs("C1")
	if err != nil {
		return nil, err
	}
	runs := []struct {
		name string
		run  func(context.Context, *Env) (*Result, error)
	}{{"W3", runW3}, {"W5", runW5}, {"W6", runW6}}
	var pairs []c1Pair
	start := time.Now()
	for i, w := range runs {
		// In turns, each workload's first side alternating, so that neither side has
		// the quieter minutes of the machine.
		sides := []*Env{plain, cl}
		if i%2 == 1 {
			sides = []*Env{cl, plain}
		}
		p := c1Pair{name: w.name}
		for _, side := range sides {
			r, err := isolated(w.run)(ctx, side)
			if err != nil {
				where := "plain node"
				if side.Citus {
					where = "cluster"
				}
				return nil, fmt.Errorf("C1: %s on the %s: %w", w.name, where, err)
			}
			if side.Citus {
				p.cluster = r
			} else {
				p.plain = r
			}
		}
		pairs = append(pairs, p)
	}
	return c1Result(ctx, plain, cl, pairs, time.Since(start)), nil
}

// c1Result is C1's report: a line per workload with both sides and the ratio, W5's
// ratio as the result's own.
func c1Result(ctx context.Context, plain, cl *Env, pairs []c1Pair, took time.Duration) *Result {
	settings, warn := settingsNote(ctx, plain, cl)
	r := &Result{Workload: "C1", Seconds: took.Seconds(), Settings: cl.Settings + "; " + settings,
		Extra: map[string]any{"keys": fmt.Sprintf("%d concurrency keys, DeleteOnSuccess, on both sides", cl.Keys)}}
	if warn != "" {
		r.Extra["warning"] = warn
	}
	for _, p := range pairs {
		line := fmt.Sprintf("plain %s jobs/s, cluster %s jobs/s, cluster/plain %.2f×",
			thousands(p.plain.JobsPerSec), thousands(p.cluster.JobsPerSec), p.cluster.JobsPerSec/max(p.plain.JobsPerSec, 1e-9))
		if p.name == "W6" {
			line = fmt.Sprintf("pickup p50/p95/p99 plain %.2f/%.2f/%.2f ms, cluster %.2f/%.2f/%.2f ms, cluster/plain p50 %.2f×, p99 %.2f×",
				p.plain.P50ms, p.plain.P95ms, p.plain.P99ms, p.cluster.P50ms, p.cluster.P95ms, p.cluster.P99ms,
				p.cluster.P50ms/max(p.plain.P50ms, 1e-9), p.cluster.P99ms/max(p.plain.P99ms, 1e-9))
		}
		r.Extra[p.name] = line
		if p.name == "W5" {
			r.N, r.JobsPerSec = p.cluster.N, p.cluster.JobsPerSec
			r.Limit, r.Ratio = "W5 on the plain node", p.cluster.JobsPerSec/max(p.plain.JobsPerSec, 1e-9)
			r.Verified = "plain " + p.plain.Verified + "; cluster " + p.cluster.Verified
			r.Extra["W5_batches_cluster"] = p.cluster.Extra["batches"]
		}
	}
	return r
}
