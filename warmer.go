package skiplock

// The warmer: while the runtime is idle, it runs the claim and the completion once on
// each of the pool's connections, so that no job waits for the first claim on a
// connection.
//
// A backend's first run of the claim parses it and plans it with cold catalog caches
// (jobs, its indexes, the queue and limit tables): 16–30 ms where a warm run takes
// 0.3 ms (docs/benchmarks.md, "W6's cold claims"). The pool hands the producer the
// connection it used last, and another only when that one is busy, so a worker meets
// a cold connection at random moments long after it started, and the jobs of that
// claim, and those notified while it runs, wait for it. A claim of no jobs and an
// empty completion on a connection leave both statements prepared, with their
// generic plans cached (the plan guard forces generic plans), on that connection.
//
// It works only while every producer waits for jobs (none has a claim in flight or
// jobs to claim), one connection at a time, so a busy worker pays nothing for it and
// an idle one spends about 20 ms of database time per connection, once. It does
// nothing when the pool does not keep prepared statements (a QueryExecMode other than
// the default cache-statement mode, as behind a transaction-pooling PgBouncer).

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/store"
)

// warmRetry and warmRetryMax pace the warmer's passes while some connection may
// still be cold (a pass met it busy): the next pass comes at the first idle moment
// after warmRetry, doubled after each pass that found no cold connection idle, up to
// warmRetryMax. Each pass takes the pool's idle connections for the microseconds it
// needs to pick a cold one, so it must not run at every idle moment.
const (
	warmRetry    = 20 * time.Millisecond
	warmRetryMax = 10 * time.Second
)

// warmTimeout bounds one connection's warm-up.
const warmTimeout = 10 * time.Second

// warm runs the warmer until the runtime's background work stops.
func (r *runtime) warm() {
	defer r.bgWG.Done()
	cfg := r.c.pool.Config()
	if cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return
	}
	// warmed holds backend pids, also those whose warm-up failed. Connections come
	// and go (MaxConnLifetime): past a few times the pool's size it is cleared, and the
	// connections still open are warmed again (cheaply: their statements are ready).
	warmed := map[uint32]bool{}
	forget := 4 * max(int(cfg.MaxConns), 1)
	// complete is the pool's count of connections ever opened when a pass last found
	// every connection idle and warm: until a new one opens, there is nothing to do.
	complete := int64(-1)
	retry := warmRetry
	for {
		select {
		case <-r.idle:
		case <-r.bgCtx.Done():
			return
		}
		opened := r.c.pool.Stat().NewConnsCount()
		if opened == complete {
			continue
		}
		if len(warmed) > forget {
			clear(warmed)
		}
		done, n := r.warmPass(warmed)
		switch {
		case done:
			complete, retry = opened, warmRetry
			continue
		case n > 0:
			retry = warmRetry
		default:
			retry = min(2*retry, warmRetryMax)
		}
		if !hostclock.Sleep(r.bgCtx, retry) {
			return
		}
	}
}

// warmPass warms the pool's idle cold connections one at a time while every producer
// waits, and returns how many it warmed; done reports that every connection of the
// pool was idle and is warm. A connection whose warm-up fails is not tried again: its
// first claim prepares the statement as it did before the warmer.
func (r *runtime) warmPass(warmed map[uint32]bool) (done bool, n int) {
	for r.allWaiting() && r.bgCtx.Err() == nil {
		total := r.c.pool.Stat().TotalConns()
		idle := r.c.pool.AcquireAllIdle(r.bgCtx)
		var cold *pgxpool.Conn
		for _, conn := range idle {
			if cold == nil && !warmed[conn.Conn().PgConn().PID()] {
				cold = conn
				continue
			}
			conn.Release()
		}
		if cold == nil {
			return int32(len(idle)) == total, n
		}
		pid := cold.Conn().PgConn().PID()
		err := r.warmConn(cold)
		cold.Release()
		warmed[pid] = true
		if err != nil {
			if r.bgCtx.Err() == nil {
				r.c.log.Debug("skiplock: warming a connection failed; its first claim will prepare the statements", "error", err)
			}
			continue
		}
		n++
		r.c.metrics.warmed.Add(1)
	}
	return false, n
}

// warmConn runs a claim of no jobs and an empty completion on conn.
func (r *runtime) warmConn(conn *pgxpool.Conn) error {
	c := r.c
	ctx, cancel := context.WithTimeout(r.bgCtx, warmTimeout)
	defer cancel()
	for queue := range r.producers {
		if r.limited(queue) {
			continue // the limited claim is another statement, warmed by its first use
		}
		if _, err := c.store.Claim(ctx, conn, store.NowParam(c.cfg.Clock), store.ClaimParams{
			Queue: queue, WorkerID: c.cfg.ID, Limit: 0, Lease: c.cfg.LeaseDuration, Lag: c.cfg.PollInterval,
		}); err != nil {
			return err
		}
		break // one queue prepares the statement for all
	}
	_, err := c.finishOn(ctx, conn, nil)
	return err
}

// allWaiting reports whether every producer is waiting for jobs (and the client is
// not stopping: a producer that stopped while waiting still says so).
func (r *runtime) allWaiting() bool {
	if r.fetchCtx.Err() != nil {
		return false
	}
	for _, p := range r.producers {
		if !p.waiting.Load() {
			return false
		}
	}
	return true
}
