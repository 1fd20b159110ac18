package bench

// W14's observer (the statistics at each window's end, the held snapshot and the
// analytic reads of the disturbed run) and the cutting of a run into its windows.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// w14Observe reads the marks at every window's end and, in the disturbed run, takes
// and releases the snapshot at the middle phase's bounds and starts the analytic reads.
func w14Observe(ctx context.Context, e *Env, plan w14Plan, start time.Time, schema string, disturb bool,
	marks []w14Mark, readTimes []time.Duration, xid *int64, read func() (w14Mark, error)) error {
	var pin *w10Pin
	defer func() { pin.release(ctx) }()
	var reads sync.WaitGroup
	defer reads.Wait()
	readErr := make(chan error, plan.total)
	startRead := func(k int) {
		reads.Add(1)
		go func() {
			defer reads.Done()
			d, err := w14AnalyticRead(ctx, e.URL, schema)
			readTimes[k] = d
			if err != nil && ctx.Err() == nil {
				readErr <- fmt.Errorf("the analytic read of window %d: %w", k, err)
			}
		}()
	}
	if disturb && plan.readAt(0) {
		startRead(0)
	}
	t := time.NewTimer(time.Until(start.Add(plan.window)))
	defer t.Stop()
	for k := 1; k <= plan.total; k++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			return err
		case <-t.C:
		}
		m, err := read()
		if err != nil {
			return fmt.Errorf("reading the table statistics at the end of window %d: %w", k-1, err)
		}
		marks[k] = m
		if disturb {
			switch k {
			case plan.warm + plan.before:
				p, err := pinSnapshot(ctx, e.URL, schema)
				if err != nil {
					return err
				}
				pin, *xid = p, p.xid
			case plan.warm + plan.before + plan.middle:
				if err := pin.release(ctx); err != nil {
					return err
				}
			}
			if k < plan.total && plan.readAt(k) {
				startRead(k)
			}
		}
		if k < plan.total {
			t.Reset(time.Until(start.Add(time.Duration(k+1) * plan.window)))
		}
	}
	return nil
}

// w14AnalyticRead is a report's heavy read: every row of the jobs table, grouped by
// kind, status and second of creation and sorted, in a REPEATABLE READ transaction
// (its snapshot lives as long as the read). It returns how long it took.
func w14AnalyticRead(ctx context.Context, url, schema string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	begin := time.Now()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	rows, err := tx.Query(ctx, `SELECT kind, status, date_trunc('second', created_at) AS s, count(*), avg(octet_length(payload::text)),
  max(updated_at - created_at) FROM `+jobs+` GROUP BY 1, 2, 3 ORDER BY 4 DESC, 3`)
	if err != nil {
		return 0, err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return time.Since(begin), nil
}

// w14Split computes one run's windows from its recorder and marks.
func w14Split(plan w14Plan, rec *w14Recorder, marks []w14Mark, readTimes []time.Duration, disturb bool) []W14Window {
	secs := plan.window.Seconds()
	out := make([]W14Window, plan.total)
	for k := range out {
		a, b := marks[k], marks[k+1]
		w := W14Window{Phase: plan.phase(k), StartS: float64(k) * secs,
			Snapshot:        disturb && plan.phase(k) == W14Middle,
			Read:            disturb && plan.readAt(k),
			ReadS:           readTimes[k].Seconds(),
			OfferedPerSec:   float64(rec.pickup[k].count()) / secs,
			CompletedPerSec: float64(b.succeeded-a.succeeded) / secs,
			P50ms:           rec.pickup[k].quantile(0.5), P99ms: rec.pickup[k].quantile(0.99),
			EnqueueP99ms: rec.enqueue[k].quantile(0.99),
			DeadTuples:   b.dead, LiveTuples: b.live,
			TableMB: float64(b.tableBytes) / (1 << 20), IndexMB: float64(b.indexBytes) / (1 << 20),
			Passes: b.passes - a.passes, Claims: b.claims - a.claims,
			RetainedPerSec: float64(b.retained-a.retained) / secs, RetentionBehind: b.behind - a.behind}
		if w.Claims > 0 {
			w.ClaimMeanMs = float64((b.claimTime - a.claimTime).Microseconds()) / 1000 / float64(w.Claims)
		}
		out[k] = w
	}
	return out
}
