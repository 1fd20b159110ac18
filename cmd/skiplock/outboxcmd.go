package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/outbox"
)

func init() {
	register("outbox", "list dead outbox events, show one, or requeue them", runOutbox)
}

type eventJSON struct {
	ID            string          `json:"id"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	EventType     string          `json:"event_type"`
	Destination   string          `json:"destination,omitempty"`
	Attempts      int             `json:"attempts"`
	CreatedAt     time.Time       `json:"created_at"`
	AvailableAt   time.Time       `json:"available_at"`
	PublishedAt   *time.Time      `json:"published_at,omitempty"`
	DeadAt        *time.Time      `json:"dead_at,omitempty"`
	LastError     string          `json:"last_error,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
}

func eventToJSON(r *outbox.Record, payload bool) eventJSON {
	e := eventJSON{ID: r.ID, AggregateType: r.AggregateType, AggregateID: r.AggregateID, EventType: r.EventType,
		Destination: r.Destination, Attempts: r.Attempts, CreatedAt: r.CreatedAt, AvailableAt: r.AvailableAt,
		PublishedAt: r.PublishedAt, DeadAt: r.DeadAt, LastError: r.LastError}
	if payload {
		e.Payload = json.RawMessage(r.Payload)
	}
	return e
}

func runOutbox(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage:
  skiplock outbox list    [--limit n] [--all]     dead events (parked after their last attempt), oldest first
  skiplock outbox show    <id>
  skiplock outbox requeue <id>... | --all-dead    make dead events due now with a fresh attempt budget
flags:
`)
		fs.PrintDefaults()
	}
	var (
		db      dbFlags
		out     outputFlag
		limit   int
		all     bool
		allDead bool
	)
	db.register(fs)
	out.register(fs)
	fs.IntVar(&limit, "limit", 50, "list: page size")
	fs.BoolVar(&all, "all", false, "list: every page")
	fs.BoolVar(&allDead, "all-dead", false, "requeue: every dead event")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("outbox: missing subcommand")
	}
	sub := args[0]
	ids, err := parseMixed(fs, args[1:])
	if err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return err
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	admin := outbox.Admin{Schema: db.schema}
	switch sub {
	case "list":
		var after *outbox.Record
		listed := []eventJSON{}
		tw := table(ctx)
		fmt.Fprintln(tw, "ID\tAGGREGATE\tEVENT\tATTEMPTS\tDEAD_AT\tLAST_ERROR")
		for {
			page, err := admin.ListDead(ctx, pool, after, limit)
			if err != nil {
				return err
			}
			for _, r := range page {
				listed = append(listed, eventToJSON(r, false))
				dead := ""
				if r.DeadAt != nil {
					dead = r.DeadAt.Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%d\t%s\t%s\n", r.ID, r.AggregateType, r.AggregateID, r.EventType, r.Attempts,
					dead, oneLine(r.LastError, 60))
			}
			if !all || len(page) < limit {
				break
			}
			after = page[len(page)-1]
		}
		if out.json() {
			return printJSON(ctx, listed)
		}
		return tw.Flush()
	case "show":
		if len(ids) != 1 {
			return errors.New("outbox show: give one event id")
		}
		r, err := admin.Get(ctx, pool, ids[0])
		if err != nil {
			return err
		}
		if out.json() {
			return printJSON(ctx, eventToJSON(r, true))
		}
		b, _ := json.MarshalIndent(eventToJSON(r, true), "", "  ")
		_, err = fmt.Fprintln(outW(ctx), string(b))
		return err
	case "requeue":
		if allDead {
			n, err := admin.RequeueDead(ctx, pool)
			if err != nil {
				return err
			}
			fmt.Fprintf(errW(ctx), "requeued %d dead events\n", n)
			if out.json() {
				return printJSON(ctx, map[string]int{"requeued": n})
			}
			_, err = fmt.Fprintf(outW(ctx), "requeued %d\n", n)
			return err
		}
		if len(ids) == 0 {
			return errors.New("outbox requeue: give event ids or --all-dead")
		}
		var failed []string
		for _, id := range ids {
			if err := admin.Requeue(ctx, pool, id); err != nil {
				fmt.Fprintf(errW(ctx), "%s: %v\n", id, err)
				failed = append(failed, id)
			}
		}
		if out.json() {
			if err := printJSON(ctx, map[string]any{"requeued": len(ids) - len(failed), "failed": failed}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(outW(ctx), "requeued %d\n", len(ids)-len(failed))
		}
		if len(failed) > 0 {
			return fmt.Errorf("outbox requeue: %d of %d failed", len(failed), len(ids))
		}
		return nil
	}
	return fmt.Errorf("outbox: unknown subcommand %q (list, show, requeue)", sub)
}
