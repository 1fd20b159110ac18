package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/spf13/cobra"
)

// The fair queues' commands (docs/fairness.md): queues fair, queues weight, queues keys.

// queueArg checks a queue name given as the first argument, before connecting.
func queueArg(cmd *cobra.Command, args []string, n int, what string) error {
	if len(args) != n {
		return usagef(cmd, "%s: want %s, got %d arguments", pathOf(cmd), what, len(args))
	}
	if err := ident.ValidateQueue(args[0]); err != nil {
		return usagef(cmd, "%s: %v", pathOf(cmd), err)
	}
	return nil
}

func newQueueFairCmd(db *dbFlags) *cobra.Command {
	var (
		off    bool
		bypass int
	)
	cmd := &cobra.Command{
		Use:   "fair <queue> [--bypass-priority N] [--off]",
		Short: "make a queue fair for every client: claims take the due jobs of its concurrency keys in turn",
		Long: `Make a queue fair for every client: claims take the due jobs of the queue's
concurrency keys (EnqueueOpts.ConcurrencyKey) in turn, round-robin, weighted by
"queues weight", so one key's backlog never delays another key's jobs. Priority
orders jobs within their key; with --bypass-priority N, jobs of priority N or higher
skip the rotation and go first, in priority order. --off makes the queue claim in
plain priority order again (weights are kept). See docs/fairness.md.`,
		Args: func(cmd *cobra.Command, args []string) error { return queueArg(cmd, args, 1, "one queue") },
	}
	cmd.Flags().BoolVar(&off, "off", false, "make the queue claim in plain priority order again")
	cmd.Flags().IntVar(&bypass, "bypass-priority", 0, "jobs of this priority or higher skip the rotation (unset: none do)")
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		queue := args[0]
		if off {
			if cmd.Flags().Changed("bypass-priority") {
				return usagef(cmd, "%s: --off and --bypass-priority contradict each other", pathOf(cmd))
			}
			if err := invalidAsUsage(cmd, c.QueueUnsetFair(cmd.Context(), queue)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queue %s claims in priority order\n", queue)
			return nil
		}
		opts := &skiplock.FairOpts{}
		if cmd.Flags().Changed("bypass-priority") {
			opts.BypassPriority = &bypass
		}
		if err := invalidAsUsage(cmd, c.QueueSetFair(cmd.Context(), queue, opts)); err != nil {
			return err
		}
		msg := "queue " + queue + " is fair by concurrency key"
		if opts.BypassPriority != nil {
			msg += fmt.Sprintf("; jobs of priority %d or higher go first", bypass)
		}
		fmt.Fprintln(cmd.OutOrStdout(), msg)
		return nil
	})
	return cmd
}

func newQueueWeightCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "weight <queue> <key> <weight>",
		Short: fmt.Sprintf("set a concurrency key's weight in a fair queue: its jobs per turn, 1 (the default) to %d", skiplock.MaxFairWeight),
		Args: func(cmd *cobra.Command, args []string) error {
			if err := queueArg(cmd, args, 3, "a queue, a key and a weight"); err != nil {
				return err
			}
			if _, err := strconv.Atoi(args[2]); err != nil {
				return usagef(cmd, "%s: weight %q is not a whole number", pathOf(cmd), args[2])
			}
			return nil
		},
	}
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		w, _ := strconv.Atoi(args[2])
		if err := invalidAsUsage(cmd, c.FairWeightSet(cmd.Context(), args[0], args[1], w)); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "key %q of queue %s weighs %d\n", args[1], args[0], w)
		return nil
	})
	return cmd
}

// fairKeysJSON is one row of queues keys (and of stats' fair queues).
type fairKeysJSON struct {
	Key              string  `json:"key"`
	Other            bool    `json:"other,omitempty"`
	Keys             int     `json:"keys"`
	Due              int64   `json:"due"`
	OldestDueSeconds float64 `json:"oldest_due_age_seconds"`
}

func fairKeysToJSON(ks []skiplock.FairKeyStats) []fairKeysJSON {
	out := make([]fairKeysJSON, len(ks))
	for i, k := range ks {
		out[i] = fairKeysJSON{Key: k.Key, Other: k.Other, Keys: k.Keys, Due: k.Due, OldestDueSeconds: k.OldestDue.Seconds()}
	}
	return out
}

// printFairKeys prints a fair queue's keys as a table.
func printFairKeys(w io.Writer, ks []skiplock.FairKeyStats, cap int) {
	tw := newTable(w)
	fmt.Fprintln(tw, "KEY\tDUE\tOLDEST_DUE")
	for _, k := range ks {
		name := strconv.Quote(k.Key)
		if k.Other {
			name = fmt.Sprintf("(%d other keys)", k.Keys)
		}
		due := strconv.FormatInt(k.Due, 10)
		if !k.Other && k.Due >= int64(cap) {
			due = "≥" + due
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, due, k.OldestDue.Round(time.Millisecond))
	}
	tw.Flush()
}

func newQueueKeysCmd(db *dbFlags) *cobra.Command {
	var top, cap int
	cmd := &cobra.Command{
		Use:   "keys <queue> [--top 10] [--cap 10000]",
		Short: "print a queue's concurrency keys with the most due jobs, and the age of each one's oldest due job",
		Long: `Print the concurrency keys of a queue with the most due jobs (--top), each with its
due jobs (counted up to --cap per key) and the age of its oldest due job, and the
other keys summed in one row. It reads one index descent per key with pending jobs
and at most --cap entries per key, whatever the backlog.`,
		Args: func(cmd *cobra.Command, args []string) error { return queueArg(cmd, args, 1, "one queue") },
	}
	cmd.Flags().IntVar(&top, "top", 10, "keys shown one by one")
	cmd.Flags().IntVar(&cap, "cap", 10_000, "due jobs counted per key")
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		if top < 1 || cap < 1 {
			return usagef(cmd, "%s: --top and --cap must be at least 1", pathOf(cmd))
		}
		ks, err := c.FairKeys(cmd.Context(), args[0], &skiplock.FairKeysOpts{Top: top, Cap: cap})
		if err := invalidAsUsage(cmd, err); err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), fairKeysToJSON(ks))
		}
		printFairKeys(cmd.OutOrStdout(), ks, cap)
		return nil
	})
	return cmd
}

// fairRead is what stats shows of one fair queue: its setting and its top keys.
type fairRead struct {
	queue skiplock.QueueInfo
	keys  []skiplock.FairKeyStats
	// noKeys: the keys were not read (the Citus layout refuses their walk).
	noKeys bool
}

// fairStatsTop is how many keys stats shows per fair queue.
const fairStatsTop = 5

// readFair reads every fair queue's top keys.
func readFair(cmd *cobra.Command, c *skiplock.Client) ([]fairRead, error) {
	qs, err := c.QueueList(cmd.Context())
	if err != nil {
		return nil, err
	}
	var out []fairRead
	for _, q := range qs {
		if !q.Fair {
			continue
		}
		ks, err := c.FairKeys(cmd.Context(), q.Name, &skiplock.FairKeysOpts{Top: fairStatsTop})
		if err != nil && !errors.Is(err, skiplock.ErrNotOnCitus) { // the Citus layout: the queue without its keys
			return nil, err
		}
		out = append(out, fairRead{queue: q, keys: ks, noKeys: err != nil})
	}
	return out, nil
}

// fairQueueJSON is a fair queue in stats --output json.
type fairQueueJSON struct {
	Queue          string         `json:"queue"`
	BypassPriority *int           `json:"bypass_priority"`
	Keys           []fairKeysJSON `json:"keys"`
}

func fairToJSON(fs []fairRead) []fairQueueJSON {
	var out []fairQueueJSON
	for _, f := range fs {
		out = append(out, fairQueueJSON{Queue: f.queue.Name, BypassPriority: f.queue.FairBypassPriority, Keys: fairKeysToJSON(f.keys)})
	}
	return out
}

// printFair prints stats' section of the fair queues.
func printFair(w io.Writer, fs []fairRead) {
	for _, f := range fs {
		bypass := ""
		if p := f.queue.FairBypassPriority; p != nil {
			bypass = fmt.Sprintf(", priority %d and up first", *p)
		}
		if f.noKeys {
			fmt.Fprintf(w, "\nfair queue %s (by concurrency key%s): its keys are not read on the Citus layout\n", f.queue.Name, bypass)
			continue
		}
		fmt.Fprintf(w, "\nfair queue %s (by concurrency key%s): top %d keys by due jobs\n", f.queue.Name, bypass, fairStatsTop)
		printFairKeys(w, f.keys, 10_000)
	}
}
