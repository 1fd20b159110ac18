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
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/uuidv7"
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
		// A bad --schema is a mistake in the command line: say so before connecting.
		// (A bad $SKIPLOCK_SCHEMA is reported by the library, as any other setting.)
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if db.schema != "" {
				if err := ident.Validate("schema", db.schema); err != nil {
					return usagef(cmd, "--schema: %v", err)
				}
			}
			return nil
		},
	}
	// --version prints what `skiplock version` prints.
	root.Version = readBuildVersion().line()
	root.SetVersionTemplate("{{.Version}}\n")
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
				// List what is valid where the words stopped matching: "help jobs
				// nosuch" names jobs' commands, not the top-level ones.
				if target == nil || !target.HasSubCommands() {
					target = cmd.Root()
				}
				return usagef(cmd, "help: unknown command %q; valid: %s", strings.Join(args, " "), strings.Join(subcommandNames(target), ", "))
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
		newServeCmd(db),
		newRetentionCmd(db),
		newPartitionsCmd(db),
		newRolesCmd(db),
		newDemoCmd(db),
		newBenchCmd(db),
		newVersionCmd(),
		newCompletionCmd(),
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
	// The library's own errors already start with "skiplock: ", also where the CLI
	// or the library wrapped them ("schedules add: skiplock: invalid spec"): keep
	// the prefix once, in front.
	msg := "skiplock: " + strings.ReplaceAll(strings.TrimPrefix(err.Error(), "skiplock: "), ": skiplock: ", ": ")
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

// eachName is a command that applies one action to every name it is given: queues
// pause|resume, schedules pause|resume|delete. Every name is checked before any is
// acted on, so a mistake in the third name does not leave the first two done.
type eachName struct {
	group, verb, what, short string
	// check, if set, validates one name without the database; an error is a usage
	// error.
	check func(name string) error
	// prepare, if set, checks every name against the database before the first
	// action (the schedule exists, the queue is paused); an error stops the command
	// with nothing done.
	prepare func(cmd *cobra.Command, c *skiplock.Client, names []string) error
	// act applies the action to one name.
	act func(cmd *cobra.Command, c *skiplock.Client, name string) error
}

// newEachNameCmd builds an eachName command. It reports each name it acted on
// ("paused mail").
func newEachNameCmd(db *dbFlags, e eachName) *cobra.Command {
	done := e.verb + "d" // paused, resumed, deleted
	cmd := &cobra.Command{
		Use:   e.verb + " <" + e.what + ">...",
		Short: e.short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef(cmd, "%s %s: name at least one %s", e.group, e.verb, e.what)
			}
			if e.check == nil {
				return nil
			}
			var bad []string
			for _, name := range args {
				if err := e.check(name); err != nil {
					bad = append(bad, err.Error())
				}
			}
			if len(bad) > 0 {
				return usagef(cmd, "%s %s: %s; nothing was %s", e.group, e.verb, strings.Join(bad, "; "), done)
			}
			return nil
		},
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		if e.prepare != nil {
			if err := e.prepare(cmd, c, args); err != nil {
				return fmt.Errorf("%w; nothing was %s", err, done)
			}
		}
		for _, name := range args {
			if err := e.act(cmd, c, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", done, name)
		}
		return nil
	})
	return cmd
}

// invalidAsUsage makes the library's refusal of a value the command line gave
// (ErrInvalid: a name, a flag's figure) a usage error, exit 2; any other error is
// returned as it is.
func invalidAsUsage(cmd *cobra.Command, err error) error {
	if errors.Is(err, skiplock.ErrInvalid) {
		return usagef(cmd, "%s: %s", pathOf(cmd), strings.TrimPrefix(err.Error(), "skiplock: "))
	}
	return err
}

// idArgs wants n positional arguments that are ids (UUIDs) of what: "a job id",
// "an event id". A mistyped id is a usage error, found before connecting.
func idArgs(n int, what string) cobra.PositionalArgs {
	_, noun, _ := strings.Cut(what, " ")
	count := exactArgs(n, "one "+noun)
	return func(cmd *cobra.Command, args []string) error {
		if err := count(cmd, args); err != nil {
			return err
		}
		return checkIDs(cmd, what, args)
	}
}

// checkIDs refuses, as a usage error, the first of ids that is not a UUID.
func checkIDs(cmd *cobra.Command, what string, ids []string) error {
	for _, id := range ids {
		if !isUUID(id) {
			return usagef(cmd, "%s: %q is not %s (a UUID)", pathOf(cmd), id, what)
		}
	}
	return nil
}

// isUUID reports whether s is a UUID in its canonical text form, the form the
// library's operations on jobs accept and skiplock prints.
func isUUID(s string) bool { return uuidv7.Valid(s) }

// durationValue is a duration flag that refuses negative values: each command says
// in the flag's help what 0 means.
type durationValue struct{ p *time.Duration }

func (d durationValue) Type() string { return "duration" }

func (d durationValue) String() string {
	if d.p == nil || *d.p == 0 {
		return "0" // not shown as a default in --help
	}
	return d.p.String()
}

func (d durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (e.g. 500ms, 5s, 2m)")
	}
	if v < 0 {
		return errors.New("want 0 or more")
	}
	*d.p = v
	return nil
}

// durationFlag registers a duration flag that refuses negative values, as a usage
// error before the command runs.
func durationFlag(cmd *cobra.Command, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	cmd.Flags().Var(durationValue{p}, name, usage)
}

// intValue is an int flag limited to min..max; any other value is refused.
type intValue struct {
	p        *int
	min, max int
}

func (v intValue) Type() string { return "int" }

func (v intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a whole number")
	}
	switch {
	case (n < v.min || n > v.max) && v.max == math.MaxInt:
		return fmt.Errorf("want %d or more", v.min)
	case n < v.min || n > v.max:
		return fmt.Errorf("want %d..%d", v.min, v.max)
	}
	*v.p = n
	return nil
}

// intFlag registers an int flag that refuses values outside min..max (max
// math.MaxInt: no upper bound), as a usage error before the command runs.
func intFlag(cmd *cobra.Command, p *int, name string, value, min, max int, usage string) {
	*p = value
	cmd.Flags().Var(intValue{p, min, max}, name, usage)
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

// serveHealth serves /healthz and /readyz for c on addr (health.Handler with opts)
// until ctx ends or stop is called; a relay's container probes them. The listener is
// opened before it returns (bound is its address), so a taken port fails the command
// at once.
func serveHealth(ctx context.Context, c *skiplock.Client, addr string, opts health.Options) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("health: listening on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	srv := &http.Server{Handler: health.Handler(c, opts), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = serveUntilDone(ctx, srv, ln)
	}()
	return ln.Addr(), func() { cancel(); <-done }, nil
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

// listenHost checks a listen address flag (host:port, the host optional, the port a
// number from 0 to 65535) before anything starts, so a wrong value is a usage error
// (exit 2) rather than a failure to listen; it returns the host.
func listenHost(cmd *cobra.Command, flag, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if n, perr := strconv.ParseUint(port, 10, 16); perr != nil || (port != "0" && n == 0) {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err != nil {
		return "", usagef(cmd, "%s: --%s %q: want host:port, such as 127.0.0.1:8080 or :9187 (%v)", pathOf(cmd), flag, addr, err)
	}
	return host, nil
}
