package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

func newFlowsCmd(db *dbFlags) *cobra.Command {
	return group("flows", "show flows: parent jobs that run once their children have finished", newFlowsShowCmd(db))
}

func newFlowsShowCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show <id>",
		Short: "show the tree of the flow a job belongs to, with each job's state",
		Args:  idArgs(1, "a job id"),
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		root, truncated, err := c.FlowTree(cmd.Context(), args[0])
		switch {
		case errors.Is(err, skiplock.ErrInvalid):
			return usagef(cmd, "%v", err)
		case errors.Is(err, skiplock.ErrNotFound):
			return fmt.Errorf("no job %s", args[0])
		case err != nil:
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), struct {
				*skiplock.FlowNode
				Truncated bool `json:"truncated,omitempty"`
			}{root, truncated})
		}
		w := cmd.OutOrStdout()
		printFlowNode(w, root, "", "", args[0])
		if truncated {
			fmt.Fprintf(w, "… (first %d jobs only)\n", skiplock.MaxFlowTree)
		}
		return nil
	})
	return cmd
}

// printFlowNode prints n and its children as an indented tree, marking the job asked
// for.
func printFlowNode(w io.Writer, n *skiplock.FlowNode, first, rest, asked string) {
	line := fmt.Sprintf("%s%s  %s  %s", first, n.ID, n.Kind, n.State)
	if len(n.Children) > 0 {
		line += fmt.Sprintf("  (%d of %d children open, on failure: %s)", n.OpenChildren, len(n.Children), n.Policy)
	}
	if n.LastError != "" && n.State != skiplock.StateSucceeded {
		line += "  error: " + oneLine(n.LastError, 80)
	}
	if n.ID == asked {
		line += "  ◀"
	}
	fmt.Fprintln(w, line)
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			printFlowNode(w, c, rest+"└─ ", rest+"   ", asked)
		} else {
			printFlowNode(w, c, rest+"├─ ", rest+"│  ", asked)
		}
	}
}

func newBatchesCmd(db *dbFlags) *cobra.Command {
	return group("batches", "list and show batches: jobs whose callback runs once they have all finished",
		newBatchesListCmd(db), newBatchesShowCmd(db))
}

func newBatchesListCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list batches, newest first, with their counts",
		Args:  noArgs,
	}
	out := newOutputFlag(cmd)
	var open bool
	var page pageFlags
	page.register(cmd)
	cmd.Flags().BoolVar(&open, "open", false, "only the batches whose completion callback has not run")
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, _ []string) error {
		all := []*skiplock.BatchInfo{}
		before := ""
		for {
			bs, err := c.BatchList(cmd.Context(), skiplock.BatchListParams{Open: open, BeforeID: before, Limit: page.limit})
			if err != nil {
				return err
			}
			all = append(all, bs...)
			if !page.all || len(bs) < page.limit {
				break
			}
			before = bs[len(bs)-1].ID
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), all)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "ID\tSTATE\tTOTAL\tSUCCEEDED\tFAILED\tCANCELLED\tCREATED\tDESCRIPTION")
		for _, b := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.ID, batchState(b), batchTotal(b), b.Succeeded, b.Failed,
				b.Cancelled, b.CreatedAt.Format(time.RFC3339), oneLine(b.Description, 40))
		}
		return tw.Flush()
	})
	return cmd
}

func newBatchesShowCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show <id>",
		Short: "show one batch: its counts, callbacks and members per state",
		Args:  idArgs(1, "a batch id"),
	}
	out := newOutputFlag(cmd)
	cmd.RunE = withClient(db, func(cmd *cobra.Command, c *skiplock.Client, args []string) error {
		b, err := c.BatchGet(cmd.Context(), args[0])
		switch {
		case errors.Is(err, skiplock.ErrInvalid):
			return usagef(cmd, "%v", err)
		case errors.Is(err, skiplock.ErrNotFound):
			return fmt.Errorf("no batch %s", args[0])
		case err != nil:
			return err
		}
		members, err := c.BatchMembers(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), struct {
				*skiplock.BatchInfo
				Members map[skiplock.JobState]int64 `json:"members"`
			}{b, members})
		}
		ts := func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.Format(time.RFC3339Nano)
		}
		var per []string
		for _, st := range skiplock.JobStates {
			if n := members[st]; n > 0 {
				per = append(per, fmt.Sprintf("%s %d", st, n))
			}
		}
		tw := newTable(cmd.OutOrStdout())
		for _, kv := range [][2]string{{"id", b.ID}, {"description", b.Description}, {"state", batchState(b)},
			{"total", batchTotal(b)}, {"succeeded", fmt.Sprint(b.Succeeded)}, {"failed", fmt.Sprint(b.Failed)},
			{"cancelled", fmt.Sprint(b.Cancelled)}, {"members", strings.Join(per, ", ")},
			{"on_complete", b.OnComplete}, {"on_failure", b.OnFailure}, {"created_at", b.CreatedAt.Format(time.RFC3339Nano)},
			{"sealed_at", ts(b.SealedAt)}, {"completed_at", ts(b.CompletedAt)}, {"failure_at", ts(b.FailureAt)}} {
			fmt.Fprintf(tw, "%s\t%s\n", kv[0], kv[1])
		}
		return tw.Flush()
	})
	return cmd
}

func batchState(b *skiplock.BatchInfo) string {
	switch {
	case b.CompletedAt != nil:
		return "completed"
	case b.SealedAt != nil:
		return "sealed"
	}
	return "open"
}

func batchTotal(b *skiplock.BatchInfo) string {
	if b.Total < 0 {
		return "-"
	}
	return fmt.Sprint(b.Total)
}
