package engine

// The warmer: while the runtime is idle, it runs the claim and the completion once on
// each of the pool's connections, so that no job waits for the first claim on a
// connection.
//
// A backend's first run of the claim parses it and plans it with cold catalog caches
// (jobs, its indexes, the queue and limit tables), many times a warm run's cost
// (docs/benchmarks-archive.md, "The targets again, and W6's cold claims"). The pool hands the producer the
// connection it used last, and another only when that one is busy, so a worker meets
// a cold connection at random moments long after it started, and the jobs of that
// claim, and those notified while it runs, wait for it. A claim of no jobs and an
// empty completion on a connection leave both statements prepared, with their
// generic plans cached (the plan guard forces generic plans), on that connection.
//
// It works only while every producer waits for jobs (none has a claim in flight or
// jobs to claim), one connection at a time, so a busy worker pays nothing for it and
// an idle one spends the time of one cold claim per connection, once. It does
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
func (e *Engine) warm() {
	defer e.bgWG.Done()
	cfg := e.cfg.Pool.Config()
	if cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || e.cfg.Citus {
		return // on Citus the claims are planned at each run (store.ClaimKey)
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
		case <-e.idle:
		case <-e.bgCtx.Done():
			return
		}
		opened := e.cfg.Pool.Stat().NewConnsCount()
		if opened == complete {
			continue
		}
		if len(warmed) > forget {
			clear(warmed)
		}
		done, n := e.warmPass(warmed)
		switch {
		case done:
			complete, retry = opened, warmRetry
			continue
		case n > 0:
			retry = warmRetry
		default:
			retry = min(2*retry, warmRetryMax)
		}
		if !hostclock.Sleep(e.bgCtx, retry) {
			return
		}
	}
}

// warmPass warms the pool's idle cold connections one at a time while every producer
// waits, and returns how many it warmed; done reports that every connection of the
// pool was idle and is warm. A connection whose warm-up fails is not tried again: its
// first claim prepares the statement as it did before the warmer.
func (e *Engine) warmPass(warmed map[uint32]bool) (done bool, n int) {
	for e.allWaiting() && e.bgCtx.Err() == nil {
		total := e.cfg.Pool.Stat().TotalConns()
		idle := e.cfg.Pool.AcquireAllIdle(e.bgCtx)
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
		err := e.warmConn(cold)
		cold.Release()
		warmed[pid] = true
		if err != nil {
			if e.bgCtx.Err() == nil {
				e.cfg.Log.Debug("skiplock: warming a connection failed; its first claim will prepare the statements", "error", err)
			}
			continue
		}
		n++
		e.cfg.Counters.Warmed.Add(1)
	}
	return false, n
}

// warmConn runs a claim of no jobs and an empty completion on conn.
func (e *Engine) warmConn(conn *pgxpool.Conn) error {
	ctx, cancel := context.WithTimeout(e.bgCtx, warmTimeout)
	defer cancel()
	for queue := range e.producers {
		if e.limited(queue) {
			continue // the limited claim is another statement, warmed by its first use
		}
		if _, err := e.cfg.Store.Claim(ctx, conn, e.now(), store.ClaimParams{
			Queue: queue, WorkerID: e.cfg.WorkerID, Limit: 0, Lease: e.cfg.LeaseDuration, Lag: e.cfg.PollInterval,
		}); err != nil {
			return err
		}
		break // one queue prepares the statement for all
	}
	_, err := Finish(ctx, e.cfg.Store, conn, e.now(), e.cfg.DeleteOnSuccess, nil)
	return err
}

// allWaiting reports whether every producer is waiting for jobs (and the client is
// not stopping: a producer that stopped while waiting still says so).
func (e *Engine) allWaiting() bool {
	if e.fetchCtx.Err() != nil {
		return false
	}
	for _, p := range e.producers {
		if !p.waiting.Load() {
			return false
		}
	}
	return true
}
