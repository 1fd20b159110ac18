package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgcluster"
	"github.com/spf13/cobra"
)

// throwawayOrNamed returns a pool on the database the flags or $DATABASE_URL name,
// or on a throwaway cluster it starts when neither does (the PG* variables are not
// consulted here: demo and bench would otherwise write into whatever server a
// developer's psql points at). The second result tells which, for messages.
func throwawayOrNamed(cmd *cobra.Command, db *dbFlags, opts pgcluster.Options, maxConns int32) (*pgxpool.Pool, string, func(), error) {
	conn := db.connString()
	stop := func() {}
	where := "the configured database"
	if conn == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: no --database-url or DATABASE_URL; starting a throwaway PostgreSQL cluster…\n", cmd.Name())
		c, err := pgcluster.Start(cmd.Context(), opts)
		if err != nil {
			return nil, "", nil, err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: PostgreSQL on 127.0.0.1:%d (data in %s, removed on exit)\n", cmd.Name(), c.Port, c.Dir)
		conn, stop, where = c.URL, func() { c.Stop() }, "throwaway"
	}
	cfg, err := poolConfig(cmd, conn, maxConns)
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	pool, err := pgxpool.NewWithConfig(cmd.Context(), cfg)
	if err == nil {
		if err = pool.Ping(cmd.Context()); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		stop()
		return nil, "", nil, fmt.Errorf("connecting to %s: %w", target(conn, cfg), err)
	}
	return pool, where, func() { pool.Close(); stop() }, nil
}

// demoSchema is the demo's schema unless --schema or $SKIPLOCK_SCHEMA names one: never
// the default schema, where an application's own jobs would meet the demo's workers.
const demoSchema = "skiplock_demo"

// demoDuration is how long the demo runs: --duration if given, else $DURATION
// (seconds, as `make demo DURATION=60` passes it), else 15 s.
func demoDuration(cmd *cobra.Command, flag time.Duration) (time.Duration, error) {
	d := flag
	if v := os.Getenv("DURATION"); v != "" && !cmd.Flags().Changed("duration") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, usagef(cmd, "DURATION=%q: want a whole number of seconds (0 runs until Ctrl-C)", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, usagef(cmd, "demo: a negative duration (%s); 0 runs until Ctrl-C", d)
	}
	return d, nil
}

func newDemoCmd(db *dbFlags) *cobra.Command {
	var dur time.Duration
	cmd := &cobra.Command{
		Use:   "demo [--duration 15s]",
		Short: "run a sample app on a throwaway PostgreSQL and show jobs flowing",
		Long: `Run a sample shop: orders written with their email job and outbox event in one
transaction, workers sending the emails (with deliberate failures), a relay
publishing signed webhooks, and live figures. When /usr/bin/python3 has psycopg 3
($SKIPLOCK_PYTHON names another interpreter), a Python worker on clients/python
(found from the working directory, or $SKIPLOCK_PYTHON_CLIENT) renders each order's
receipt from queue "receipts" beside the Go workers.

Without --database-url or DATABASE_URL it starts a throwaway PostgreSQL from the
installed binaries and removes it on exit. On a database you name, it works in a
schema of its own (skiplock_demo, or --schema), and refuses a schema that holds
jobs or outbox events it did not write: its workers would fail them and its relay
would publish them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := demoDuration(cmd, dur)
			if err != nil {
				return err
			}
			schema := demoSchema
			if db.schema != "" || os.Getenv("SKIPLOCK_SCHEMA") != "" {
				schema = db.schemaName()
			}
			pool, _, cleanup, err := throwawayOrNamed(cmd, db, pgcluster.Options{}, 20)
			if err != nil {
				return err
			}
			defer cleanup()
			return demoApp(cmd.Context(), d, pool, schema, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().DurationVar(&dur, "duration", 15*time.Second, "how long to run; 0 runs until Ctrl-C ($DURATION, in seconds, replaces the default)")
	return cmd
}
