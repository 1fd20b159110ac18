package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrate"
)

// isolated runs a workload and then drops the schemas it made, so that no workload
// runs beside the leftovers of the ones before it. Those kept pages in shared
// buffers and gave autovacuum work during later workloads: in the full bench W7 fell
// from ~55k to ~45k jobs/s two thirds of the way through, and autovacuum was
// vacuuming B1's 100,000 jobs during its last tenth, which ran at 76% of its first
// (92–119% with the leftovers dropped; docs/benchmarks-archive.md).
func isolated(run func(context.Context, *Env) (*Result, error)) func(context.Context, *Env) (*Result, error) {
	return func(ctx context.Context, e *Env) (*Result, error) {
		e.created = nil
		r, err := run(ctx, e)
		for _, name := range e.created {
			if derr := dropSchema(context.WithoutCancel(ctx), e.Pool, name); derr != nil && err == nil {
				err = fmt.Errorf("dropping schema %s: %w", name, derr)
			}
		}
		e.created = nil
		return r, err
	}
}

// dropSchema drops the schema name and what it holds. On Citus a drop of distributed
// tables takes locks on every node, and another session's DDL on the cluster (a
// schema made or dropped beside it) can make it a distributed deadlock's victim
// (40P01), which rolls it back whole: it is then tried again, up to 5 times.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, name string) error {
	var err error
	for range 5 {
		_, err = pool.Exec(ctx, `DROP SCHEMA IF EXISTS "`+name+`" CASCADE`)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
	return err
}

// schema creates a fresh, migrated schema for a workload.
func (e *Env) schema(ctx context.Context, name string) (string, error) {
	if e.Citus {
		// Citus 13.2 sends a migration's function to the worker nodes with the schema's
		// name folded to lower case, which fails for "bench_W5".
		name = strings.ToLower(name)
	}
	if err := dropSchema(ctx, e.Pool, name); err != nil {
		return "", err
	}
	e.created = append(e.created, name)
	if _, err := migrate.Up(ctx, e.Pool, name); err != nil {
		return "", err
	}
	if e.Citus {
		if _, err := migrate.Citus(ctx, e.Pool, name); err != nil {
			return "", fmt.Errorf("the Citus layout of %s: %w", name, err)
		}
	}
	return name, nil
}

// clientConfig is cfg for a workload's client on e: with e.DeleteOnSuccess it deletes
// succeeded jobs, and on Citus the scheduler and the retention service are off, so
// that their walks of every shard do not run beside the workload's statements.
func (e *Env) clientConfig(cfg skiplock.Config) skiplock.Config {
	cfg.DeleteOnSuccess = cfg.DeleteOnSuccess || e.DeleteOnSuccess
	if e.Citus {
		cfg.SchedulerInterval = -1
		cfg.Retention.Interval = -1
	}
	return cfg
}

// key is the concurrency key of the i-th job of W3, W5 or W6: one of e.Keys, round
// robin, or none.
func (e *Env) key(i int) string { return keyName(i, e.Keys) }

// keyName is the i-th job's concurrency key when the jobs are spread round robin over
// keys keys ("tenant-0" …), or none when keys is 0.
func keyName(i, keys int) string {
	if keys <= 0 {
		return ""
	}
	return "tenant-" + strconv.Itoa((i%keys+keys)%keys)
}

// schemaClient creates a fresh, migrated schema, opens a pool of conns connections
// (pool) and returns a client on them; the caller closes both.
func (e *Env) schemaClient(ctx context.Context, name string, conns int32) (*skiplock.Client, *pgxpool.Pool, error) {
	schema, err := e.schema(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pool, err := e.pool(ctx, conns)
	if err != nil {
		return nil, nil, err
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}

// pool opens a pool of conns connections for a workload's clients, and returns once
// all of them are open. pgxpool.NewWithConfig returns before its MinConns are
// connected, so without the wait the first statements of a timed run queued behind
// the opening of the application's own connections: 60–100 ms of W5's 1.3 s on this
// VM (docs/benchmarks-archive.md, 2026-12-01 16:10). Opening them is the application's
// setup, like the backlog checkpointed before the clock; what each statement costs
// on its first use on a connection (parsing and planning against a cold catalog
// cache, ~17 ms for the claim) is the queue's, and stays in the throughput
// workloads' timing. The latency workloads start their clock once the working
// client's own warmer has paid it (waitWarmed).
func (e *Env) pool(ctx context.Context, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	cfg.MinConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	held := make([]*pgxpool.Conn, 0, conns)
	for range conns {
		var c *pgxpool.Conn
		if c, err = pool.Acquire(ctx); err != nil {
			break
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	if len(held) < int(conns) {
		pool.Close()
		return nil, fmt.Errorf("opening the workload's %d connections: %w", conns, err)
	}
	return pool, nil
}

// progress prints "\r[W5] done/total" to Progress until stop is closed.
func (e *Env) progress(name string, total int, done func() int64) (stop func()) {
	if e.Progress == nil {
		return func() {}
	}
	if f, ok := e.Progress.(interface{ Stat() (os.FileInfo, error) }); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return func() {} // not a terminal: no bar
		}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintf(e.Progress, "\r%-60s\r", "")
				return
			case <-t.C:
				d := done()
				width := 30
				filled := int(float64(width) * float64(d) / float64(max(total, 1)))
				filled = min(max(filled, 0), width)
				fmt.Fprintf(e.Progress, "\r[%s] %s%s %d/%d", name, strings.Repeat("█", filled), strings.Repeat("░", width-filled), d, total)
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}
