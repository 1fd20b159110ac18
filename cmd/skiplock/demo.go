package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgcluster"
)

func init() {
	register("demo", "run a sample app on a throwaway PostgreSQL and show jobs flowing", runDemo)
}

// demoDatabase returns a pool on $DATABASE_URL, or on a throwaway cluster it starts.
func demoDatabase(ctx context.Context, url string, durable bool, maxConns int32) (*pgxpool.Pool, func(), error) {
	stop := func() {}
	if url == "" {
		fmt.Fprintln(os.Stderr, "demo: no DATABASE_URL; starting a throwaway PostgreSQL cluster…")
		c, err := pgcluster.Start(ctx, pgcluster.Options{Durable: durable})
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(os.Stderr, "demo: PostgreSQL on 127.0.0.1:%d (data in %s, removed on exit)\n", c.Port, c.Dir)
		url, stop = c.URL, func() { c.Stop() }
	}
	db := dbFlags{url: url}
	pool, err := db.pool(ctx, maxConns)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); stop() }, nil
}

func durationFromEnv(def time.Duration) time.Duration {
	if v := os.Getenv("DURATION"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return time.Duration(n) * time.Second
		}
	}
	return def
}

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var db dbFlags
	db.register(fs)
	dur := fs.Duration("duration", durationFromEnv(15*time.Second), "how long to run; 0 runs until Ctrl-C (default $DURATION seconds, else 15s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, cleanup, err := demoDatabase(ctx, db.url, false, 20)
	if err != nil {
		return err
	}
	defer cleanup()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	return demoApp(ctx, pool, db.schema)
}
