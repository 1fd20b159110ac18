package chaos

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
)

// rebalanceRun is what the citus-rebalance round recorded of its move.
type rebalanceRun struct {
	node                 string
	port                 int
	added, start, end    time.Time
	job                  int64
	moves                []shardMove
	state                string
	onNew, total, groups int
}

type shardMove struct {
	task        int64
	what        string
	start, done time.Time
}

// rebalanceTransferMode is how citus-rebalance moves shards. The layout's tx_lineage
// has no replica identity, so Citus's default (auto: logical replication) refuses the
// move; logical replication also needs wal_level = logical on every node, which the
// script's clusters do not set. block_writes copies each shard group while writes to
// it wait (docs/citus.md, "Online growth").
const rebalanceTransferMode = "block_writes"

// injectRebalance waits a baseline, adds a worker node, starts the rebalance and
// follows its moves until citus_rebalance_wait() returns, then lets the load run
// for as long again as the baseline.
func injectRebalance(ctx context.Context, r *round) error {
	began := wallNow()
	if err := pause(ctx, r.p.faultPhase/2); err != nil {
		return err
	}
	var workers int
	if err := r.onCoordinator(ctx, "counting worker nodes", func() error {
		return r.h.pool.QueryRow(ctx, "SELECT count(*) FROM citus_get_active_worker_nodes()").Scan(&workers)
	}); err != nil {
		return err
	}
	if workers >= citusMaxWorkers {
		return fmt.Errorf("the cluster has %d worker nodes already, the most the harness reserved ports for", workers)
	}
	rb := &rebalanceRun{node: "worker" + strconv.Itoa(workers+1), port: r.h.citus.port + workers + 1}
	r.rebalance = rb
	start := wallNow()
	if _, err := r.h.citus.run(ctx, "add-worker", strconv.Itoa(workers+1)); err != nil {
		return fmt.Errorf("%w; the end of %s.log:\n%s", err, rb.node, r.h.citus.logTail(rb.node, 20))
	}
	rb.added = wallNow()
	r.mark("citus.sh add-worker "+strconv.Itoa(workers+1), start)
	rb.start = wallNow()
	// A start that fails computes the shard sizes and schedules nothing, so trying
	// again on a fresh session is safe.
	if err := r.onCoordinator(ctx, "citus_rebalance_start", func() error {
		return r.h.pool.QueryRow(ctx, "SELECT citus_rebalance_start(shard_transfer_mode => '"+rebalanceTransferMode+"')").Scan(&rb.job)
	}); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() {
		_, err := r.h.pool.Exec(ctx, "SELECT citus_rebalance_wait()")
		waited <- err
	}()
	seen := map[int64]*shardMove{}
	poll := func() error {
		rows, err := r.h.pool.Query(ctx, `SELECT task_id, status::text, command FROM pg_dist_background_task WHERE job_id = $1`, rb.job)
		if err != nil {
			return fmt.Errorf("following the rebalance: %w", err)
		}
		defer rows.Close()
		now := wallNow()
		for rows.Next() {
			var id int64
			var status, cmd string
			if err := rows.Scan(&id, &status, &cmd); err != nil {
				return err
			}
			m := seen[id]
			if m == nil {
				m = &shardMove{task: id, what: cmd}
				seen[id] = m
			}
			if status == "running" && m.start.IsZero() {
				m.start = now
			}
			if status == "done" && m.done.IsZero() {
				if m.start.IsZero() {
					m.start = now
				}
				m.done = now
			}
		}
		return rows.Err()
	}
	var werr error
	for done := false; !done; {
		select {
		case werr = <-waited:
			done = true
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if err := poll(); err != nil {
			return err
		}
	}
	rb.end = wallNow()
	if werr != nil {
		return fmt.Errorf("citus_rebalance_wait: %w", werr)
	}
	for _, m := range seen {
		rb.moves = append(rb.moves, *m)
	}
	sort.Slice(rb.moves, func(i, j int) bool { return rb.moves[i].task < rb.moves[j].task })
	if err := r.h.pool.QueryRow(ctx, "SELECT state::text FROM pg_dist_background_job WHERE job_id = $1", rb.job).Scan(&rb.state); err != nil {
		return fmt.Errorf("reading the rebalance job: %w", err)
	}
	r.mark(fmt.Sprintf("citus_rebalance_start(%s): %d moves", rebalanceTransferMode, len(rb.moves)), rb.start)
	return pause(ctx, time.Until(rb.end.Add(rb.start.Sub(began))))
}

// rebalanceWindow is the width of the per-window pickup rows.
const rebalanceWindow = 2 * time.Second

// verifyRebalance checks that the move happened — the job finished, the new node
// holds shards of the round's jobs — and reports the pickup latency per window.
func verifyRebalance(ctx context.Context, r *round, row *Row) error {
	rb := r.rebalance
	if rb == nil {
		row.Violations = append(row.Violations, "no rebalance ran")
		return nil
	}
	if rb.added.IsZero() {
		// The node never joined: the fault injection's own violation says why, and
		// nothing about a move can be judged.
		return nil
	}
	if rb.state != "finished" {
		row.Violations = append(row.Violations, fmt.Sprintf("the rebalance job %d ended %q, not finished", rb.job, rb.state))
	}
	err := r.h.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE p.nodeport = $2), count(*)
FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid) JOIN pg_dist_node p ON p.groupid = pl.groupid
WHERE s.logicalrelid = $1::regclass`, ident.Quote(r.schema)+".jobs", rb.port).Scan(&rb.onNew, &rb.total)
	if err != nil {
		return fmt.Errorf("reading the shard placements: %w", err)
	}
	if rb.onNew == 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("no shard of %s.jobs is on the new node %s after the rebalance", r.schema, rb.node))
	}
	if len(rb.moves) == 0 {
		row.Violations = append(row.Violations, "the rebalance moved nothing")
	}
	ps, err := r.pickups(ctx)
	if err != nil {
		return err
	}
	var first, last time.Time
	if len(ps) > 0 {
		first, last = ps[0].enqueued, ps[len(ps)-1].enqueued.Add(time.Nanosecond)
	}
	r.prod.mu.Lock()
	calls := append([]enqueueCall(nil), r.prod.calls...)
	r.prod.mu.Unlock()
	row.Pickup = append(row.Pickup, fmt.Sprintf("%-7s %7s  %-44s  %-30s  %s", "phase", "start s", "pickup: business row → first claim", "enqueue call → commit", "moves done"))
	phase := func(t time.Time) string {
		switch {
		case t.Before(rb.start):
			return "before"
		case t.Before(rb.end):
			return "during"
		default:
			return "after"
		}
	}
	for w := first; w.Before(last); w = w.Add(rebalanceWindow) {
		done := 0
		for _, m := range rb.moves {
			if !m.done.Before(w) && m.done.Before(w.Add(rebalanceWindow)) {
				done++
			}
		}
		row.Pickup = append(row.Pickup, fmt.Sprintf("%-7s %7.1f  %-44s  %-30s  %d", phase(w), w.Sub(first).Seconds(),
			pickupSummary(ps, w, w.Add(rebalanceWindow)), enqueueSummary(calls, w, w.Add(rebalanceWindow)), done))
	}
	// The round is about writes while shards move: with none, it showed nothing of
	// them, however clean its invariants (CI's run before this check: "during: no
	// calls" over 363 s of moves).
	if len(durationsIn(calls, rb.start, rb.end, enqueueCall.timed)) == 0 {
		row.Violations = append(row.Violations, fmt.Sprintf("no enqueue that began during the rebalance (%.1f s) committed", rb.end.Sub(rb.start).Seconds()))
	}
	var longest time.Duration
	for _, m := range rb.moves {
		longest = max(longest, m.done.Sub(m.start))
	}
	row.Pickup = append(row.Pickup, fmt.Sprintf("pickup before: %s | during (%.1f s, %d moves, longest %.1f s): %s | after: %s; "+
		"enqueue before: %s | during: %s | after: %s; %d of %d shards of jobs on %s",
		pickupSummary(ps, first, rb.start), rb.end.Sub(rb.start).Seconds(), len(rb.moves), longest.Seconds(),
		pickupSummary(ps, rb.start, rb.end), pickupSummary(ps, rb.end, last),
		enqueueSummary(calls, first, rb.start), enqueueSummary(calls, rb.start, rb.end), enqueueSummary(calls, rb.end, last),
		rb.onNew, rb.total, rb.node))
	return nil
}

// enqueueSummary is the p50, p99 and max time from the enqueue call to its commit,
// of the committed calls that began in [from, to).
func enqueueSummary(calls []enqueueCall, from, to time.Time) string {
	ds := durationsIn(calls, from, to, enqueueCall.timed)
	if len(ds) == 0 {
		return "no calls"
	}
	return durationSummary(ds)
}
