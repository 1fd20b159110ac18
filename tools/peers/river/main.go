// Command river runs the shapes of skiplock bench's W5 and W6 against River, so that
// its figures sit beside skiplock's from the same machine and server
// (docs/benchmarks-archive.md, "Peers measured on this machine"). It is a module of its own,
// so skiplock's module never depends on River; run it by hand:
//
//	go run . -url postgres://…/throwaway w3
//	go run . -url postgres://…/throwaway w5
//	go run . -url postgres://…/throwaway w6
//	go run . -url postgres://…/throwaway -cooldown 1ms w10
//
// Each run empties the database's public schema and migrates River into it.
//
// W3: 100,000 no-op jobs inserted by 2 goroutines in batches of 1,000, each batch one
// InsertManyFast call (River's COPY-based bulk insert) on its own, as skiplock's W3
// enqueues its batches from 2 goroutines; the rows are counted afterwards.
//
// W5: 50,000 no-op jobs inserted before the clock (InsertManyFast, batches of 1,000,
// then a CHECKPOINT), then a client with MaxWorkers -workers (100) on the default
// queue; the clock runs from Start until every job's handler has run, and each job's
// runs are counted. W6: 40 warm-up jobs, then 2,000 autocommit Insert calls at 200 a
// second, open loop, from a second client with its own pool of 40 connections, timed
// from just before Insert to the worker's first line. -cooldown sets FetchCooldown
// (River's default is 100 ms, its minimum 1 ms) on every client: it spaces the
// worker's fetches, and the inserting client's notifications of a queue too. W10, the
// pinned vacuum horizon, is described in w10.go.
//
// It reads the host clock on purpose, in one place (clock.go): it is a stopwatch around
// a third-party system, and wall time is what it measures.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct {
	I int `json:"i"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	ran func(i int)
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[noopArgs]) error {
	w.ran(job.Args.I)
	return nil
}

func main() {
	url := flag.String("url", os.Getenv("URL"), "a throwaway database (its public schema is emptied)")
	workers := flag.Int("workers", 100, "W5: MaxWorkers of the default queue")
	cooldown := flag.Duration("cooldown", 0, "FetchCooldown of every client (0: River's default, 100ms)")
	scale := flag.Float64("scale", 1, "W10: the windows' length is 10s times this (1: a 12-minute run)")
	flag.Parse()
	const usage = "usage: river -url postgres://… [-workers 100] [-cooldown 1ms] [-scale 1] w3|w5|w6|w10"
	switch {
	case *url == "" || flag.NArg() != 1:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	case !slices.Contains([]string{"w3", "w5", "w6", "w10"}, flag.Arg(0)):
		fmt.Fprintf(os.Stderr, "river: unknown workload %q (w3, w5, w6 or w10)\n%s\n", flag.Arg(0), usage)
		os.Exit(2)
	case *scale <= 0 || *workers < 1 || *cooldown < 0:
		fmt.Fprintf(os.Stderr, "river: -scale must be positive, -workers at least 1, -cooldown not negative (got %g, %d, %v)\n%s\n",
			*scale, *workers, *cooldown, usage)
		os.Exit(2)
	}
	ctx := context.Background()
	var err error
	switch flag.Arg(0) {
	case "w3":
		err = w3(ctx, *url)
	case "w5":
		err = w5(ctx, *url, *workers, *cooldown)
	case "w6":
		err = w6(ctx, *url, *cooldown)
	case "w10":
		err = w10(ctx, *url, *cooldown, *scale)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

// freshPool empties the public schema, migrates River into it and returns a pool
// of size conns.
func freshPool(ctx context.Context, url string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public"); err != nil {
		return nil, fmt.Errorf("emptying the schema: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrating: %w", err)
	}
	return pool, nil
}

func w5(ctx context.Context, url string, maxWorkers int, cooldown time.Duration) error {
	const total = 50000
	pool, err := freshPool(ctx, url, min(maxWorkers+10, 100))
	if err != nil {
		return err
	}
	defer pool.Close()
	runs := make([]atomic.Int32, total)
	var done atomic.Int64
	all := make(chan struct{})
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{ran: func(i int) {
		runs[i].Add(1)
		if done.Add(1) == total {
			close(all)
		}
	}})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers: ws, Logger: quiet(), FetchCooldown: cooldown,
	})
	if err != nil {
		return err
	}
	for from := 0; from < total; from += 1000 {
		batch := make([]river.InsertManyParams, 0, 1000)
		for i := from; i < from+1000; i++ {
			batch = append(batch, river.InsertManyParams{Args: noopArgs{I: i}})
		}
		if _, err := client.InsertManyFast(ctx, batch); err != nil {
			return fmt.Errorf("inserting: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	start := now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-all
	elapsed := since(start)
	if err := client.Stop(ctx); err != nil {
		return err
	}
	wrong := 0
	for i := range runs {
		if runs[i].Load() != 1 {
			wrong++
		}
	}
	fmt.Printf("W5 River MaxWorkers=%d FetchCooldown=%v: %.0f jobs/s (%d jobs not run exactly once)\n", maxWorkers, cooldown, total/elapsed.Seconds(), wrong)
	return nil
}

func w3(ctx context.Context, url string) error {
	const total, batch, goroutines = 100000, 1000, 2
	pool, err := freshPool(ctx, url, goroutines)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: quiet()})
	if err != nil {
		return err
	}
	var next atomic.Int64
	errs := make(chan error, goroutines)
	start := now()
	for range goroutines {
		go func() {
			for {
				from := int(next.Add(batch)) - batch
				if from >= total {
					errs <- nil
					return
				}
				params := make([]river.InsertManyParams, 0, batch)
				for i := from; i < from+batch; i++ {
					params = append(params, river.InsertManyParams{Args: noopArgs{I: i}})
				}
				if _, err := client.InsertManyFast(ctx, params); err != nil {
					errs <- fmt.Errorf("inserting: %w", err)
					return
				}
			}
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			return err
		}
	}
	elapsed := since(start)
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job").Scan(&rows); err != nil {
		return err
	}
	fmt.Printf("W3 River InsertManyFast, batches of %d, %d goroutines: %.0f jobs/s (%d rows, want %d)\n", batch, goroutines, total/elapsed.Seconds(), rows, total)
	return nil
}

// runCount counts handler runs (its caller holds the lock that guards it) and closes
// warmed after the warm-up's runs and all after every run expected.
type runCount struct {
	n, warm, total int
	warmed, all    chan struct{}
}

func newRunCount(warm, total int) *runCount {
	return &runCount{warm: warm, total: warm + total, warmed: make(chan struct{}), all: make(chan struct{})}
}

func (c *runCount) add() {
	switch c.n++; c.n {
	case c.warm:
		close(c.warmed)
	case c.total:
		close(c.all)
	}
}

// latencyRig holds the two clients of the latency workloads (W6, W10), as skiplock's
// bench has them: a working client, started, with MaxWorkers 100 on a pool of 10 whose
// handler calls ran with each job's index, and an inserting client of the application
// on a pool of its own of 40, opened before the clock.
type latencyRig struct {
	workPool, appPool *pgxpool.Pool
	worker, app       *river.Client[pgx.Tx]
}

func newLatencyRig(ctx context.Context, url string, cooldown time.Duration, ran func(i int)) (_ *latencyRig, err error) {
	r := &latencyRig{}
	defer func() {
		if err != nil {
			r.close(ctx)
		}
	}()
	if r.workPool, err = freshPool(ctx, url, 10); err != nil {
		return nil, err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{ran: ran})
	r.worker, err = river.NewClient(riverpgxv5.New(r.workPool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers: ws, Logger: quiet(), FetchCooldown: cooldown,
	})
	if err != nil {
		return nil, err
	}
	if err := r.worker.Start(ctx); err != nil {
		r.worker = nil // nothing to stop
		return nil, err
	}
	appCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	appCfg.MaxConns, appCfg.MinConns = 40, 40
	if r.appPool, err = pgxpool.NewWithConfig(ctx, appCfg); err != nil {
		return nil, err
	}
	r.app, err = river.NewClient(riverpgxv5.New(r.appPool), &river.Config{Logger: quiet(), FetchCooldown: cooldown})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// close stops the working client and closes both pools.
func (r *latencyRig) close(ctx context.Context) {
	if r.worker != nil {
		r.worker.Stop(context.WithoutCancel(ctx))
	}
	if r.appPool != nil {
		r.appPool.Close()
	}
	if r.workPool != nil {
		r.workPool.Close()
	}
}

func w6(ctx context.Context, url string, cooldown time.Duration) error {
	const total, warm, rate = 2000, 40, 200
	started := make([]time.Time, total+warm)
	var mu sync.Mutex
	runs := newRunCount(warm, total)
	rig, err := newLatencyRig(ctx, url, cooldown, func(i int) {
		at := now()
		mu.Lock()
		defer mu.Unlock()
		started[i] = at
		runs.add()
	})
	if err != nil {
		return err
	}
	defer rig.close(ctx)
	app := rig.app
	for i := 0; i < warm; i++ {
		if _, err := app.Insert(ctx, noopArgs{I: i}, nil); err != nil {
			return err
		}
	}
	select {
	case <-runs.warmed:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("warm-up: %d of %d jobs ran", runs.n, warm)
	}
	begin := make([]time.Time, total+warm)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var wg sync.WaitGroup
	var insertErr atomic.Pointer[error]
	for k := 0; k < total; k++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			b := now()
			if _, err := app.Insert(ctx, noopArgs{I: i}, nil); err != nil {
				insertErr.Store(&err)
			}
			mu.Lock()
			begin[i] = b
			mu.Unlock()
		}(warm + k)
	}
	wg.Wait()
	if p := insertErr.Load(); p != nil {
		return *p
	}
	select {
	case <-runs.all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("only %d of %d jobs ran", runs.n, total+warm)
	}
	mu.Lock()
	lat := make([]time.Duration, 0, total)
	for i := warm; i < total+warm; i++ {
		lat = append(lat, started[i].Sub(begin[i]))
	}
	mu.Unlock()
	slices.Sort(lat)
	ms := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)))].Microseconds()) / 1000 }
	fmt.Printf("W6 River FetchCooldown=%v: p50/p95/p99 %.2f / %.2f / %.2f ms\n", cooldown, ms(0.5), ms(0.95), ms(0.99))
	return nil
}
