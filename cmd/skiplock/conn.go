package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/redact"
	"github.com/spf13/cobra"
)

// dbFlags are the connection flags, global to every command.
type dbFlags struct {
	url     string
	schema  string
	verbose bool
}

func (d *dbFlags) register(root *cobra.Command) {
	fs := root.PersistentFlags()
	// Defaults are read when a command runs, not shown in --help: $DATABASE_URL may
	// hold a password.
	fs.StringVar(&d.url, "database-url", "", "PostgreSQL connection `string`, URL or key=value (default $DATABASE_URL,\nelse the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, …)")
	fs.StringVar(&d.schema, "schema", "", "schema holding skiplock's tables (default $SKIPLOCK_SCHEMA, else "+skiplock.DefaultSchema+")")
	fs.BoolVarP(&d.verbose, "verbose", "v", false, "log at debug level")
}

// connString is --database-url, else $DATABASE_URL; empty means the PG* variables.
func (d *dbFlags) connString() string {
	if d.url != "" {
		return d.url
	}
	return os.Getenv("DATABASE_URL")
}

// schemaName is --schema, else $SKIPLOCK_SCHEMA, else the default schema.
func (d *dbFlags) schemaName() string {
	if d.schema != "" {
		return d.schema
	}
	if s := os.Getenv("SKIPLOCK_SCHEMA"); s != "" {
		return s
	}
	return skiplock.DefaultSchema
}

func (d *dbFlags) logger(cmd *cobra.Command) *slog.Logger {
	level := slog.LevelInfo
	if d.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
}

// poolConfig parses the connection string; an empty one is parsed too, so pgx reads
// the libpq environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE,
// PGSERVICE, …) and its defaults exactly as psql would. The connections are named
// after the command unless the string or PGAPPNAME already names them.
func poolConfig(cmd *cobra.Command, conn string, maxConns int32) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, fmt.Errorf("parsing the connection string: %s", parseErrorText(err))
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = cmd.CommandPath()
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	return cfg, nil
}

// refuseUnmigrated stops a long-running command (dashboard, metrics) on a schema
// that is reachable but not migrated for this build — a misspelt --schema, most
// often — which would otherwise serve errors at every request. A database that
// cannot be reached is not refused, and not waited for beyond a few seconds: those
// commands report outages while they run.
func refuseUnmigrated(ctx context.Context, c *skiplock.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.CheckSchema(ctx); errors.Is(err, skiplock.ErrNotMigrated) || errors.Is(err, skiplock.ErrSchemaNewer) {
		return err
	}
	return nil
}

// parseErrorText is pgx's parse error with the connection string redacted by
// redact.DSN. pgx hides passwords in it too, but by its own best effort, which
// leaves part of an escaped one (password=x\ y shows as "xxxxx y"); a mask applied
// to that text cannot take the rest back, so the message is rebuilt from the
// original string. The reason follows the string's closing "`: ".
func parseErrorText(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return redact.DSN(err.Error())
	}
	text := pe.Error()
	reason := ""
	if i := strings.LastIndex(text, "`: "); i >= 0 {
		reason = text[i+3:]
	}
	return fmt.Sprintf("cannot parse `%s`: %s", redact.DSN(pe.ConnString), redact.DSN(reason))
}

// target describes where a connection string points, for messages: the string
// with its password redacted, or the PG* variables' host and database.
func target(conn string, cfg *pgxpool.Config) string {
	if conn != "" {
		return redact.DSN(conn)
	}
	c := cfg.ConnConfig
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s (from the PG* environment)", c.Host, c.Port, c.User, c.Database)
}

// openPool opens a pool without connecting: the first query connects. Commands
// that must work while the database is down (metrics) use it directly.
func (d *dbFlags) openPool(cmd *cobra.Command, maxConns int32) (*pgxpool.Pool, string, error) {
	conn := d.connString()
	cfg, err := poolConfig(cmd, conn, maxConns)
	if err != nil {
		return nil, "", err
	}
	where := target(conn, cfg)
	d.logger(cmd).Debug("database", "target", where, "application_name", cfg.ConnConfig.RuntimeParams["application_name"])
	pool, err := pgxpool.NewWithConfig(cmd.Context(), cfg)
	if err != nil {
		return nil, "", fmt.Errorf("opening a pool for %s: %w", where, err)
	}
	return pool, where, nil
}

// pool opens a pool and checks that the database answers.
func (d *dbFlags) pool(cmd *cobra.Command, maxConns int32) (*pgxpool.Pool, error) {
	pool, where, err := d.openPool(cmd, maxConns)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(cmd.Context()); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to %s: %w", where, err)
	}
	return pool, nil
}

// client opens a pool and an unstarted client for an operations command; done
// closes both.
func (d *dbFlags) client(cmd *cobra.Command, maxConns int32) (c *skiplock.Client, done func(), err error) {
	pool, err := d.pool(cmd, maxConns)
	if err != nil {
		return nil, nil, err
	}
	c, err = skiplock.NewClient(pool, skiplock.Config{Schema: d.schemaName(), Logger: d.logger(cmd)})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); pool.Close() }, nil
}
