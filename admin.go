package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// This file holds the operator's verbs on jobs by id: get, list, retry, cancel, delete.

// JobGet returns one job. ErrNotFound if no job has that id.
func (c *Client) JobGet(ctx context.Context, id string) (*Job, error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, err
	}
	return c.adminRow(ctx, id, "getting", "")(c.store.Get(ctx, c.pool, id))
}

// ListParams filter and page JobList. Zero values match everything.
type ListParams struct {
	States []JobState
	Queue  string
	Kind   string
	// Tag keeps the jobs that carry this tag.
	Tag string
	// Search keeps the jobs whose payload or last error contains this text
	// (case-insensitive). It reads every row the other filters leave: narrow it
	// with a state, queue or kind on large tables.
	Search string
	// Metadata keeps the jobs whose metadata has every one of these entries. Like
	// Search it is not indexed: narrow it with a state, queue or kind on large tables.
	Metadata map[string]string
	// AfterID continues a listing after the last id of the previous page (a job id;
	// anything else is ErrInvalid).
	AfterID string
	// Limit is the page size. Default 100, at most 10,000.
	Limit int
}

// JobList lists jobs oldest first, filtered by state, queue and kind, paged by id.
func (c *Client) JobList(ctx context.Context, p ListParams) ([]*Job, error) {
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.Limit < 0 || p.Limit > 10000 {
		return nil, invalid("limit", "must be 1..10000")
	}
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if p.AfterID != "" && !isUUID(p.AfterID) {
		return nil, invalid("after_id", "%q is not a job id (a UUID)", p.AfterID)
	}
	sp, err := c.storeListParams(p)
	if err != nil {
		return nil, err
	}
	rows, err := c.store.List(ctx, c.pool, sp)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", wrapPgError(err))
	}
	return fromRows(rows), nil
}

// storeListParams checks p's filters and converts them for the store.
func (c *Client) storeListParams(p ListParams) (store.ListParams, error) {
	sp := store.ListParams{Queue: p.Queue, Kind: p.Kind, AfterID: p.AfterID, Limit: p.Limit, Tag: p.Tag, Search: p.Search}
	if len(p.Metadata) > 0 {
		meta, err := encodeMetadata(p.Metadata)
		if err != nil {
			return sp, err
		}
		sp.Metadata = meta
	}
	for _, s := range p.States {
		if _, err := ParseJobState(string(s)); err != nil {
			return sp, err
		}
		sp.Statuses = append(sp.Statuses, string(s))
	}
	return sp, nil
}

// JobRetry makes a failed or cancelled job pending and due now, granting at least one
// more attempt. ErrNotFound if no job has that id; ErrJobState if it is not failed or
// cancelled.
func (c *Client) JobRetry(ctx context.Context, id string) (*Job, error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, err
	}
	return c.adminRow(ctx, id, "retrying", "only failed or cancelled jobs can be retried")(c.store.AdminRetry(ctx, c.pool, store.NowParam(c.cfg.Clock), id))
}

// JobCancel cancels a pending, running or waiting job. A running job's worker loses its
// lease at its next heartbeat: its context is cancelled and its outcome is not written.
// A waiting flow parent's cancellation cancels its children that have not started.
// ErrNotFound if no job has that id; ErrJobState if it has already finished.
func (c *Client) JobCancel(ctx context.Context, id, reason string) (*Job, error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, err
	}
	return c.adminRow(ctx, id, "cancelling", "only pending, running or waiting jobs can be cancelled")(c.store.AdminCancel(ctx, c.pool, store.NowParam(c.cfg.Clock), id, safetext.Clean(reason)))
}

// JobDelete deletes a job that is not running. ErrNotFound if no job has that id;
// ErrJobState if it is running (cancel it first).
func (c *Client) JobDelete(ctx context.Context, id string) (*Job, error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, err
	}
	return c.adminRow(ctx, id, "deleting", "a running job cannot be deleted; cancel it first")(c.store.AdminDelete(ctx, c.pool, id))
}

// checkAdmin validates an admin verb's context and job id.
func checkAdmin(ctx context.Context, id string) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if !isUUID(id) {
		return invalid("id", "%q is not a job id (a UUID)", id)
	}
	return nil
}

// isUUID reports whether s has the textual form of a UUID.
func isUUID(s string) bool { return uuidv7.Valid(s) }

// adminRow turns an admin statement's result into the verb's answer. A statement that
// matched no row is explained: either no job has the id (ErrNotFound), or it is in
// a state the verb does not apply to (ErrJobState, with the rule that refused it).
func (c *Client) adminRow(ctx context.Context, id, verb, rule string) func(*store.Job, error) (*Job, error) {
	return func(row *store.Job, err error) (*Job, error) {
		what := verb + " job " + id
		if errors.Is(err, pgx.ErrNoRows) {
			if rule != "" {
				if cur, gerr := c.store.Get(ctx, c.pool, id); gerr == nil {
					return nil, fmt.Errorf("%s: it is %s; %s: %w", what, cur.Status, rule, ErrJobState)
				}
			}
			return nil, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, wrapPgError(err))
		}
		return fromRow(row), nil
	}
}

// JobRunNow makes a pending job due now (it keeps its place among equal priorities
// by run_at). ErrNotFound if no job has that id; ErrJobState if it is not pending.
func (c *Client) JobRunNow(ctx context.Context, id string) (*Job, error) {
	if err := checkAdmin(ctx, id); err != nil {
		return nil, err
	}
	return c.adminRow(ctx, id, "running now", "only pending jobs can be run now")(c.store.AdminRunNow(ctx, c.pool, store.NowParam(c.cfg.Clock), id))
}

// JobsByTx returns every job the transaction txid wrote (Job.TxID), oldest first:
// with outbox's Admin.EventsByTx, everything one business transaction wrote. A
// transaction that wrote one job and nothing else — Enqueue, EnqueueRaw or
// EnqueueMany of one job, which insert in a transaction of their own — records no
// lineage (that job is all of it), so JobsByTx returns none for it; a caller's
// transaction (EnqueueTx and the other …Tx calls) and a batch are always recorded.
func (c *Client) JobsByTx(ctx context.Context, txid int64) ([]*Job, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if txid <= 0 {
		return nil, invalid("txid", "%d is not a transaction id", txid)
	}
	rows, err := c.store.JobsByTx(ctx, c.pool, txid)
	if err != nil {
		return nil, fmt.Errorf("listing the jobs of transaction %d: %w", txid, wrapPgError(err))
	}
	return fromRows(rows), nil
}
