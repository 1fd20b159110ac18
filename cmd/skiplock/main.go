// Command skiplock migrates, runs, inspects and benchmarks skiplock job queues and
// outbox relays. Run `skiplock --help` for the commands.
//
// Install with: go install github.com/skiplock/skiplock/cmd/skiplock@latest
//
// Exit status: 0 on success (and for --help), 2 for a mistake in the command line
// (unknown command or flag, a bad flag value, a wrong number of arguments), 1 for
// any other error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCmd()
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// newRootCmd builds the whole command tree. Each command writes to its
// cmd.OutOrStdout() and cmd.ErrOrStderr(), so tests run it in-process.
func newRootCmd() *cobra.Command {
	db := &dbFlags{}
	root := &cobra.Command{
		Use:   "skiplock",
		Short: "PostgreSQL job queue and transactional outbox: migrate, run relays, inspect and repair",
		Long: `skiplock migrates, runs, inspects and benchmarks skiplock job queues and outbox relays.

Connection: --database-url, else $DATABASE_URL, else the libpq environment variables
(PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, PGAPPNAME, …) as psql reads
them. Connections are named "skiplock <command>" (application_name) unless the
connection string or PGAPPNAME names them.

Output: commands that print data take -o table (the default) or -o json.`,
		SilenceErrors:              true, // exitCode prints them
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		Args:                       subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{cmd: cmd, err: err}
	})
	db.register(root)
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "help about any command",
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := cmd.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usagef(cmd, "help: unknown command %q; valid: %s", strings.Join(args, " "), strings.Join(subcommandNames(cmd.Root()), ", "))
			}
			return target.Help()
		},
	})
	root.AddCommand(
		newMigrateCmd(db),
		newRelayCmd(db),
		newJobsCmd(db),
		newStatsCmd(db),
		newQueuesCmd(db),
		newLimitsCmd(db),
		newSchedulesCmd(db),
		newFlowsCmd(db),
		newBatchesCmd(db),
		newOutboxCmd(db),
		newMetricsCmd(db),
		newDashboardCmd(db),
		newRetentionCmd(db),
		newPartitionsCmd(db),
		newRolesCmd(db),
		newDemoCmd(db),
		newBenchCmd(db),
		newVersionCmd(),
	)
	return root
}

// usageError is a mistake in the command line; exitCode maps it to status 2.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError for cmd.
func usagef(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// exitCode prints err on stderr, if there is one, and returns the process's exit
// status: 0 for nil, 2 for a usage error, 1 for anything else. main and the tests
// both map errors through it.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	// The library's own errors already start with "skiplock: ".
	msg := "skiplock: " + strings.TrimPrefix(err.Error(), "skiplock: ")
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, msg)
		if ue.cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ue.cmd.CommandPath())
		}
		return 2
	}
	fmt.Fprintln(stderr, msg)
	return 1
}

// group returns a command that only holds subcommands: run without one, or with
// an unknown one, it is a usage error naming the valid ones.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:                        use + " <command>",
		Short:                      short,
		Args:                       subcommandArgs,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef(cmd, "%s: missing command; valid: %s", pathOf(cmd), strings.Join(subcommandNames(cmd), ", "))
		},
	}
	g.AddCommand(subs...)
	return g
}

// subcommandArgs refuses arguments to a command that only holds subcommands: cobra
// gets here when the first argument named none of them.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q; valid: %s", args[0], cmd.CommandPath(), strings.Join(subcommandNames(cmd), ", "))
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return &usageError{cmd: cmd, err: errors.New(msg)}
}

// pathOf is the command's path below the root ("jobs show"), for messages that
// exitCode prefixes with "skiplock: ".
func pathOf(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return names
}

// exactArgs wants n positional arguments, named by what (e.g. "a job id").
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef(cmd, "%s: want %s, got %d arguments", pathOf(cmd), what, len(args))
		}
		return nil
	}
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef(cmd, "%s: unexpected arguments %q", pathOf(cmd), args)
	}
	return nil
}

// enumFlag is a flag whose value is one of a fixed list; any other value is a
// usage error that names the list.
type enumFlag struct {
	value string
	valid []string
}

func (e *enumFlag) String() string { return e.value }
func (e *enumFlag) Type() string   { return strings.Join(e.valid, "|") }
func (e *enumFlag) Set(v string) error {
	if !slices.Contains(e.valid, v) {
		return fmt.Errorf("%q is not one of: %s", v, strings.Join(e.valid, ", "))
	}
	e.value = v
	return nil
}

// enumListFlag is a comma-separated (and repeatable) list of values from a fixed
// list.
type enumListFlag struct {
	values []string
	valid  []string
}

func (e *enumListFlag) String() string { return strings.Join(e.values, ",") }
func (e *enumListFlag) Type() string   { return strings.Join(e.valid, "|") }
func (e *enumListFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(e.valid, s) {
			return fmt.Errorf("%q is not one of: %s", s, strings.Join(e.valid, ", "))
		}
		if !slices.Contains(e.values, s) {
			e.values = append(e.values, s)
		}
	}
	return nil
}

// addEnum registers an enum flag with shell completion of its values.
func addEnum(cmd *cobra.Command, f *enumFlag, name, short, usage string) {
	cmd.Flags().VarP(f, name, short, usage)
	_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(f.valid, cobra.ShellCompDirectiveNoFileComp))
}

// addEnumList registers an enum list flag with shell completion of its values.
func addEnumList(cmd *cobra.Command, f *enumListFlag, name, usage string) {
	cmd.Flags().Var(f, name, usage)
	_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(f.valid, cobra.ShellCompDirectiveNoFileComp))
}

// newEachNameCmd builds a command that applies one action to every name it is given,
// in order, and reports each ("paused mail"): queues pause|resume, schedules
// pause|resume|delete. act returns the error to report for a name.
func newEachNameCmd(db *dbFlags, group, verb, what, short string,
	act func(cmd *cobra.Command, c *skiplock.Client, name string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   verb + " <" + what + ">...",
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef(cmd, "%s %s: name at least one %s", group, verb, what)
			}
			return nil
		},
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		for _, name := range args {
			if err := act(cmd, c, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%sd %s\n", verb, name) // paused, resumed, deleted
		}
		return nil
	})
	return cmd
}

// names lists a string-typed enum's values as strings (the valid values of a flag).
func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// serveUntilDone serves srv on ln until ctx ends (SIGINT, SIGTERM), then shuts it
// down, giving requests in flight 5 seconds.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// withClient makes a RunE that opens a client on the command's database, runs f with
// it, and closes it.
func withClient(db *dbFlags, f func(cmd *cobra.Command, c *skiplock.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, done, err := db.client(cmd, 2)
		if err != nil {
			return err
		}
		defer done()
		return f(cmd, c, args)
	}
}
