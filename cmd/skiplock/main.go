// Command skiplock migrates, runs, inspects and benchmarks skiplock job queues and
// outbox relays. Run `skiplock help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{summary, run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: skiplock <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun `skiplock <command> -h` for a command's flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage(os.Stdout)
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "skiplock: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "skiplock:", err)
		os.Exit(1)
	}
}

// dbFlags are the connection flags every database command takes.
type dbFlags struct {
	url     string
	schema  string
	verbose bool
}

func (d *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.url, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	fs.StringVar(&d.schema, "schema", envOr("SKIPLOCK_SCHEMA", skiplock.DefaultSchema), "schema holding skiplock's tables (default $SKIPLOCK_SCHEMA or skiplock)")
	fs.BoolVar(&d.verbose, "v", false, "log at debug level")
}

func (d *dbFlags) logger() *slog.Logger {
	level := slog.LevelInfo
	if d.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func (d *dbFlags) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	if d.url == "" {
		return nil, errors.New("no database: pass --database-url or set DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to %s: %w", redact(d.url), err)
	}
	return pool, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// redact hides a password in a connection string for messages.
func redact(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		if at := strings.Index(url[i:], "@"); at >= 0 {
			if colon := strings.Index(url[i+3:i+at], ":"); colon >= 0 {
				return url[:i+3+colon+1] + "****" + url[i+at:]
			}
		}
	}
	return url
}
