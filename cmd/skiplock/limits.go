package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

func newLimitsCmd(db *dbFlags) *cobra.Command {
	return group("limits", "list, set or delete concurrency and rate limits (enforced by every client), or show their usage",
		newLimitsListCmd(db), newLimitsSetCmd(db), newLimitsDeleteCmd(db), newLimitsUsageCmd(db))
}

// limitJSON is a limit as the CLI prints it: scope and target spelled out, the rate's
// window in seconds (encoding/json would give a time.Duration in nanoseconds).
type limitJSON struct {
	Scope      string    `json:"scope"`
	Target     string    `json:"target"`
	Key        string    `json:"key"`
	MaxRunning int       `json:"max_running,omitempty"`
	Rate       int       `json:"rate,omitempty"`
	PerSeconds float64   `json:"per_seconds,omitempty"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
}

func limitToJSON(l skiplock.Limit) limitJSON {
	scope, target := limitScope(l)
	return limitJSON{Scope: scope, Target: target, Key: l.Key, MaxRunning: l.MaxRunning, Rate: l.Rate,
		PerSeconds: l.Per.Seconds(), UpdatedAt: l.UpdatedAt}
}

// limitUsageJSON is one bucket's use of a limit as the CLI prints it.
type limitUsageJSON struct {
	limitJSON
	Bucket  string `json:"bucket"`
	Holding int64  `json:"holding"`
	Started int64  `json:"started"`
}

func limitUsageToJSON(u skiplock.LimitUsage) limitUsageJSON {
	j := limitUsageJSON{limitJSON: limitToJSON(u.Limit), Bucket: u.Bucket, Holding: u.Holding, Started: u.Started}
	j.UpdatedAt = time.Time{}
	return j
}

// limitScope returns ("queue", name) or ("kind", name).
func limitScope(l skiplock.Limit) (scope, target string) {
	if l.Kind != "" {
		return "kind", l.Kind
	}
	return "queue", l.Queue
}

// limitName names a limit as the CLI's flags do: "queue email key *".
func limitName(l skiplock.Limit) string {
	scope, target := limitScope(l)
	if l.Key == "" {
		return scope + " " + target
	}
	return scope + " " + target + " key " + l.Key
}

// keyOrDash shows a limit's key in a table: "-" for a limit on all jobs together.
func keyOrDash(k string) string {
	if k == "" {
		return "-"
	}
	return k
}

func maxRunningText(l skiplock.Limit) string {
	if l.MaxRunning == 0 {
		return "-"
	}
	return fmt.Sprint(l.MaxRunning)
}

func rateText(l skiplock.Limit) string {
	if l.Rate == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%s", l.Rate, l.Per)
}

// limitTarget are the flags that name a limit: --queue or --kind, and --key.
type limitTarget struct {
	queue, kind, key string
}

func (f *limitTarget) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.queue, "queue", "", "the queue the limit governs (this or --kind)")
	fs.StringVar(&f.kind, "kind", "", "the job kind the limit governs, across every queue (this or --queue)")
	fs.StringVar(&f.key, "key", "", `"" for all jobs together, '*' for each concurrency key separately, or one key (overrides '*')`)
}

// limit checks that exactly one of --queue and --kind is given, and the names, and
// returns the limit they name.
func (f *limitTarget) limit(cmd *cobra.Command) (skiplock.Limit, error) {
	if (f.queue == "") == (f.kind == "") {
		return skiplock.Limit{}, usagef(cmd, "%s: give exactly one of --queue and --kind", pathOf(cmd))
	}
	l := skiplock.Limit{Queue: f.queue, Kind: f.kind, Key: f.key}
	named := l
	named.MaxRunning = 1 // Validate wants a figure; only the names are checked here
	return l, invalidAsUsage(cmd, named.Validate())
}

func newLimitsListCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list every limit: scope, target, key (- all jobs together, * each key), max running, rate",
		Args:  noArgs,
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		list, err := c.LimitList(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			views := make([]limitJSON, len(list))
			for i, l := range list {
				views[i] = limitToJSON(l)
			}
			return printJSON(cmd.OutOrStdout(), views)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "SCOPE\tTARGET\tKEY\tMAX_RUNNING\tRATE\tUPDATED_AT")
		for _, l := range list {
			scope, target := limitScope(l)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", scope, target, keyOrDash(l.Key), maxRunningText(l), rateText(l),
				tsOrDash(l.UpdatedAt))
		}
		return tw.Flush()
	})
	return cmd
}

func newLimitsSetCmd(db *dbFlags) *cobra.Command {
	var (
		f                limitTarget
		maxRunning, rate int
		per              time.Duration
	)
	cmd := &cobra.Command{
		Use:   "set (--queue q | --kind k) [--key '*'|key] [--max-running n] [--rate n --per d]",
		Short: "add or replace a limit, for every client at once (figures not given are removed)",
		Long: `Add a limit, or replace the one with the same queue or kind and key: the new figures
replace the old ones entirely (a figure not given is no longer limited). Every client
applies it from its next claim.

  --key ''     (the default) all the queue's or kind's jobs together
  --key '*'    each concurrency key (EnqueueOpts.ConcurrencyKey) separately
  --key acme   the key acme, replacing the '*' limit for it

--max-running caps the jobs running at once; --rate with --per caps the starts in
any window of that length (an exact sliding window). See docs/limits.md.`,
		Example: `  skiplock limits set --queue email --max-running 50
  skiplock limits set --queue email --key '*' --max-running 5
  skiplock limits set --queue email --key acme --max-running 20
  skiplock limits set --kind sms --rate 100 --per 1s`,
		Args: noArgs,
	}
	f.register(cmd)
	fs := cmd.Flags()
	intFlag(cmd, &maxRunning, "max-running", 0, 1, skiplock.MaxLimit, fmt.Sprintf("most jobs running at once, 1..%d", skiplock.MaxLimit))
	intFlag(cmd, &rate, "rate", 0, 1, skiplock.MaxLimit, fmt.Sprintf("most starts per --per window, 1..%d", skiplock.MaxLimit))
	fs.DurationVar(&per, "per", 0, "the rate's window, 1ms..24h (with --rate)")
	out := newOutputFlag(cmd)
	var l skiplock.Limit
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if l, err = f.limit(cmd); err != nil {
			return err
		}
		switch {
		case fs.Changed("per") != fs.Changed("rate"):
			return usagef(cmd, "%s: --rate and --per go together (at most --rate starts in any --per window)", pathOf(cmd))
		case !fs.Changed("max-running") && !fs.Changed("rate"):
			return usagef(cmd, "%s: give --max-running, --rate with --per, or both (limits delete removes a limit)", pathOf(cmd))
		}
		l.MaxRunning, l.Rate, l.Per = maxRunning, rate, per
		return invalidAsUsage(cmd, l.Validate())
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		if err := c.LimitSet(cmd.Context(), l); err != nil {
			return invalidAsUsage(cmd, err)
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), limitToJSON(l))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "set limit %s\n", l)
		return nil
	})
	return cmd
}

func newLimitsDeleteCmd(db *dbFlags) *cobra.Command {
	var f limitTarget
	cmd := &cobra.Command{
		Use:   "delete (--queue q | --kind k) [--key '*'|key]",
		Short: "delete the limit of a queue or kind with that key (jobs it held back run at once)",
		Args:  noArgs,
	}
	f.register(cmd)
	var l skiplock.Limit
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		l, err = f.limit(cmd)
		return err
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		ok, err := c.LimitDelete(cmd.Context(), l)
		if err != nil {
			return invalidAsUsage(cmd, err)
		}
		if !ok {
			return fmt.Errorf("no limit %s", l)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "deleted limit %s\n", l)
		return nil
	})
	return cmd
}

func newLimitsUsageCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "show each limit's use across every client: per bucket, slots held / max running and starts / rate in the window",
		Long: `Show each limit's use across every client, one line per bucket: a limit on all jobs
together is one bucket; a '*' limit has one per concurrency key that is running jobs
or started any within its window. HOLDING counts the jobs holding a slot: claimed or
running under an unexpired lease (a limit slot's waiting successor holds none).`,
		Args: noArgs,
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		use, err := c.LimitUsages(cmd.Context())
		if err != nil {
			return err
		}
		if out.json() {
			views := make([]limitUsageJSON, len(use))
			for i, u := range use {
				views[i] = limitUsageToJSON(u)
			}
			return printJSON(cmd.OutOrStdout(), views)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "SCOPE\tTARGET\tKEY\tBUCKET\tHOLDING\tSTARTED")
		for _, u := range use {
			scope, target := limitScope(u.Limit)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", scope, target, keyOrDash(u.Limit.Key), keyOrDash(u.Bucket),
				holdingText(u), startedText(u))
		}
		return tw.Flush()
	})
	return cmd
}

// holdingText is "3/5" (slots held of max), or "3" without a concurrency limit.
func holdingText(u skiplock.LimitUsage) string {
	if u.Limit.MaxRunning == 0 {
		return fmt.Sprint(u.Holding)
	}
	return fmt.Sprintf("%d/%d", u.Holding, u.Limit.MaxRunning)
}

// startedText is "40/100 per 1s" (starts in the window of the rate), or "-".
func startedText(u skiplock.LimitUsage) string {
	if u.Limit.Rate == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d per %s", u.Started, u.Limit.Rate, u.Limit.Per)
}

// limitSummary is one limit's line in stats: a '*' limit's buckets folded into the
// count of active keys, the busiest one and how many are at their limit.
type limitSummary struct {
	keys, full       int
	holding, started int64
}

// printLimits writes stats' limits section: one line per limit, nothing when there
// is none.
func printLimits(w io.Writer, limits []skiplock.Limit, use []skiplock.LimitUsage) {
	if len(limits) == 0 {
		return
	}
	id := func(l skiplock.Limit) string { return l.Queue + "\x00" + l.Kind + "\x00" + l.Key }
	sums := make(map[string]*limitSummary, len(limits))
	for _, l := range limits {
		sums[id(l)] = &limitSummary{}
	}
	for _, u := range use {
		s := sums[id(u.Limit)]
		if s == nil { // set between the two reads
			continue
		}
		s.keys++
		s.holding, s.started = max(s.holding, u.Holding), max(s.started, u.Started)
		if (u.Limit.MaxRunning > 0 && u.Holding >= int64(u.Limit.MaxRunning)) || (u.Limit.Rate > 0 && u.Started >= int64(u.Limit.Rate)) {
			s.full++
		}
	}
	fmt.Fprintln(w, "\nlimits:")
	tw := newTable(w)
	for _, l := range limits {
		s := sums[id(l)]
		name := limitName(l)
		u := skiplock.LimitUsage{Limit: l, Holding: s.holding, Started: s.started}
		use := []string{}
		if l.MaxRunning > 0 {
			use = append(use, "holding "+holdingText(u))
		}
		if l.Rate > 0 {
			use = append(use, "started "+startedText(u))
		}
		text := strings.Join(use, ", ")
		if l.Key == skiplock.EachKey {
			text = fmt.Sprintf("%s, %s at the limit; busiest: %s", plural(s.keys, "active key"), plural(s.full, "key"), text)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, text)
	}
	tw.Flush()
}

// plural is "1 key", "2 keys".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
