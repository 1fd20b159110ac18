package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/outbox"
	"github.com/spf13/cobra"
)

func newOutboxCmd(db *dbFlags) *cobra.Command {
	return group("outbox", "list outbox events by state, show one, or requeue dead ones",
		newOutboxListCmd(db), newOutboxShowCmd(db), newOutboxRequeueCmd(db))
}

// outboxAdmin opens a pool and the outbox administration of the schema; done closes
// both.
func outboxAdmin(cmd *cobra.Command, db *dbFlags) (*pgxpool.Pool, outbox.Admin, func(), error) {
	c, done, err := db.client(cmd, 2)
	if err != nil {
		return nil, outbox.Admin{}, nil, err
	}
	o, err := outbox.New(c, outbox.Config{})
	if err != nil {
		done()
		return nil, outbox.Admin{}, nil, err
	}
	return c.Pool(), o.Admin(), done, nil
}

// eventView is an outbox record as the CLI prints it: the record's own JSON, with
// the payload as the JSON it is rather than base64.
type eventView struct {
	*outbox.Record
	Payload json.RawMessage `json:"payload,omitempty"`
}

func newOutboxListCmd(db *dbFlags) *cobra.Command {
	var (
		state = enumFlag{value: "dead", valid: []string{"dead", "pending", "published"}}
		pages pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list [--state dead|pending|published] [--limit n] [--all]",
		Short: "list outbox events in one state (default dead: parked after their last attempt), oldest first",
		Long: `List outbox events in one state, oldest first:

  dead       parked after their last attempt or a permanent error (the default:
             what an operator acts on, with "outbox requeue")
  pending    written and not yet published: new, being relayed, or waiting to retry
  published  confirmed by a publisher and not yet removed by retention`,
		Args: noArgs,
	}
	addEnum(cmd, &state, "state", "", "which events")
	pages.register(cmd)
	out := newOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		pool, admin, done, err := outboxAdmin(cmd, db)
		if err != nil {
			return err
		}
		defer done()
		var after *outbox.Record
		listed := []eventView{}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "ID\tAGGREGATE\tEVENT\tDESTINATION\tATTEMPTS\tCREATED_AT\tPUBLISHED_AT\tDEAD_AT\tLAST_ERROR")
		for {
			page, err := admin.List(cmd.Context(), pool, outbox.State(state.value), after, pages.limit)
			if err != nil {
				return err
			}
			for _, r := range page {
				listed = append(listed, eventView{Record: r}) // the payload is for outbox show
				fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.AggregateType, r.AggregateID, r.EventType,
					r.Destination, r.Attempts, r.CreatedAt.Format(time.RFC3339), tsPtr(r.PublishedAt, time.RFC3339),
					tsPtr(r.DeadAt, time.RFC3339), lastErrorCell(r.LastError, r.ID, 60))
			}
			if !pages.all || len(page) < pages.limit {
				if !pages.all && len(page) == pages.limit {
					fmt.Fprintln(cmd.ErrOrStderr(), "more events: --all")
				}
				break
			}
			after = page[len(page)-1]
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), listed)
		}
		return tw.Flush()
	}
	return cmd
}

// lastErrorCell is an event's last error as outbox list's LAST_ERROR column shows
// it, in at most n runes (-o json and outbox show keep the full text). A publisher's
// error names the event and where it went before saying what went wrong —
// "webhookpub: posting <id> to <url>: Post "<url>": dial tcp …: connect: connection
// refused" — so cutting its end left only that preamble. Instead:
//   - the event's own id is dropped: it is the row's ID column;
//   - lines are joined and runs of white space made one space;
//   - a message still too long keeps its end, where a Go error chain puts the root
//     cause, from the start of one of the wrapped messages (after a ": ") so that
//     the column starts with a whole message behind "…": the longest such tail that
//     fits. A quoted detail (`: "…"`, e.g. an HTTP response body) belongs to the
//     message before it and does not start one; when even the innermost message is
//     too long, it is shown from its start and cut at its end, its start (an HTTP
//     status, the failing call) being the part that says most.
func lastErrorCell(s, id string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if id != "" {
		s = strings.ReplaceAll(strings.ReplaceAll(s, " "+id, ""), id, "")
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	innermost := -1 // where the last wrapped message starts
	quoted, escaped := false, false
	for i, c := range r {
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case !quoted && c == ' ' && i > 0 && r[i-1] == ':' && i+1 < len(r) && r[i+1] != '"':
			if len(r)-(i+1) <= n-1 {
				return "…" + string(r[i+1:])
			}
			innermost = i + 1
		}
	}
	if innermost < 0 {
		return string(r[:n-1]) + "…"
	}
	return "…" + string(r[innermost:innermost+n-2]) + "…"
}

// eventState names an event's state as outbox list --state does.
func eventState(r *outbox.Record) string {
	switch {
	case r.PublishedAt != nil:
		return "published"
	case r.DeadAt != nil:
		return "dead"
	}
	return "pending"
}

func tsPtr(t *time.Time, layout string) string {
	if t == nil {
		return ""
	}
	return t.Format(layout)
}

func newOutboxShowCmd(db *dbFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show <id>",
		Short: "show every field of one outbox event: headers, payload, relay state",
		Args:  idArgs(1, "an event id"),
	}
	out := newOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		pool, admin, done, err := outboxAdmin(cmd, db)
		if err != nil {
			return err
		}
		defer done()
		r, err := admin.Get(cmd.Context(), pool, args[0])
		if errors.Is(err, outbox.ErrNotFound) {
			return fmt.Errorf("no outbox event %s", args[0])
		}
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(cmd.OutOrStdout(), eventView{Record: r, Payload: json.RawMessage(r.Payload)})
		}
		tw := newTable(cmd.OutOrStdout())
		rows := [][2]string{{"id", r.ID}, {"state", eventState(r)}, {"aggregate_type", r.AggregateType}, {"aggregate_id", r.AggregateID},
			{"event_type", r.EventType}, {"destination", r.Destination}, {"attempts", fmt.Sprintf("%d of %d", r.Attempts, r.MaxAttempts)},
			{"created_at", r.CreatedAt.Format(time.RFC3339Nano)}, {"available_at", r.AvailableAt.Format(time.RFC3339Nano)},
			{"relay_until", tsPtr(r.RelayUntil, time.RFC3339Nano)}, {"published_at", tsPtr(r.PublishedAt, time.RFC3339Nano)},
			{"dead_at", tsPtr(r.DeadAt, time.RFC3339Nano)}, {"last_error", r.LastError}}
		names := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		if len(names) == 0 {
			rows = append(rows, [2]string{"headers", ""})
		}
		for _, k := range names {
			rows = append(rows, [2]string{"header " + k, r.Headers[k]})
		}
		rows = append(rows, [2]string{"payload", string(r.Payload)})
		for _, kv := range rows {
			fmt.Fprintf(tw, "%s\t%s\n", kv[0], strings.ReplaceAll(kv[1], "\n", " "))
		}
		return tw.Flush()
	}
	return cmd
}

func newOutboxRequeueCmd(db *dbFlags) *cobra.Command {
	var allDead bool
	cmd := &cobra.Command{
		Use:   "requeue <id>... | --all-dead",
		Short: "make dead events due now with a fresh attempt budget",
		Args: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 0) == !allDead {
				return usagef(cmd, "outbox requeue: give event ids or --all-dead (one of the two)")
			}
			return checkIDs(cmd, "an event id", args)
		},
	}
	cmd.Flags().BoolVar(&allDead, "all-dead", false, "every dead event")
	out := newOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, ids []string) error {
		pool, admin, done, err := outboxAdmin(cmd, db)
		if err != nil {
			return err
		}
		defer done()
		if allDead {
			n, err := admin.RequeueDead(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if out.json() {
				return printJSON(cmd.OutOrStdout(), map[string]any{"requeued": n, "failed": []string{}})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "requeued %d\n", n)
			return err
		}
		failed := []string{}
		for _, id := range ids {
			if err := admin.Requeue(cmd.Context(), pool, id); err != nil {
				if errors.Is(err, outbox.ErrNotFound) {
					err = fmt.Errorf("no outbox event %s", id)
					if r, gerr := admin.Get(cmd.Context(), pool, id); gerr == nil {
						err = fmt.Errorf("outbox event %s is %s: only dead events can be requeued", id, eventState(r))
					}
				}
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				failed = append(failed, id)
			}
		}
		if out.json() {
			if err := printJSON(cmd.OutOrStdout(), map[string]any{"requeued": len(ids) - len(failed), "failed": failed}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "requeued %d\n", len(ids)-len(failed))
		}
		if len(failed) > 0 {
			return fmt.Errorf("outbox requeue: %d of %d failed", len(failed), len(ids))
		}
		return nil
	}
	return cmd
}
