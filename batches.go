package skiplock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/safetext"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// This file holds batches: independent jobs added in one or several transactions,
// with callback jobs released once they have all finished (docs/flows.md).

// ErrBatchSealed is returned by BatchAdd when the batch is sealed: it takes no more
// members. Nothing was written.
var ErrBatchSealed = errors.New("skiplock: batch is sealed")

// MaxBatchAdd bounds the jobs of one BatchAdd call (a batch has no limit).
const MaxBatchAdd = MaxFlowJobs

// Batch describes a batch to open.
type Batch struct {
	// Description labels the batch for operators (skiplock batches list). Optional.
	Description string
	// OnComplete is the job enqueued when the batch is sealed and every member has
	// finished (succeeded, failed or cancelled). Optional.
	OnComplete *EnqueueParams
	// OnFailure is the job enqueued when the first member fails for good or is
	// cancelled; it is cancelled if the batch completes without a failure. Optional.
	OnFailure *EnqueueParams
}

// BatchOpen opens a batch in its own transaction on the client's pool, as
// BatchOpenTx does in the caller's.
func (c *Client) BatchOpen(ctx context.Context, b Batch) (string, error) {
	return c.BatchOpenTx(ctx, c.pool, b)
}

// BatchOpenTx opens a batch in tx (any DB) and returns its id: the batch exists iff
// tx commits. Its callbacks are inserted at once as waiting jobs (StateWaiting) and
// validated as EnqueueTx validates jobs; the batch releases each at most once.
func (c *Client) BatchOpenTx(ctx context.Context, tx DB, b Batch) (string, error) {
	if err := checkDB(ctx, tx); err != nil {
		return "", err
	}
	if len(b.Description) > MaxDedupKeyLen {
		return "", invalid("description", "longer than %d bytes", MaxDedupKeyLen)
	}
	stamp := hostclock.Now()
	var (
		nodes                 []store.FlowNode
		queues                []string
		onComplete, onFailure *[16]byte
	)
	for i, cb := range []*EnqueueParams{b.OnComplete, b.OnFailure} {
		if cb == nil {
			continue
		}
		n, err := c.memberParams(ctx, *cb, i)
		if err != nil {
			return "", fmt.Errorf("batch callback: %w", err)
		}
		n.ID, n.Waiting = uuidv7.New(stamp, uint32(i+1)), true
		id := n.ID
		if i == 0 {
			onComplete = &id
		} else {
			onFailure = &id
		}
		nodes, queues = append(nodes, n), append(queues, n.Queue)
	}
	id := uuidv7.New(stamp, 0)
	err := c.store.BatchOpen(ctx, tx, store.NowParam(c.cfg.Clock), id, safetext.Clean(b.Description),
		onComplete, onFailure, nodes, c.coalescer.Tx(queues))
	if err != nil {
		return "", fmt.Errorf("opening a batch: %w", wrapPgError(err))
	}
	return uuidv7.String(id), nil
}

// BatchAdd adds jobs to an open batch in their own transaction on the client's pool,
// as BatchAddTx does in the caller's.
func (c *Client) BatchAdd(ctx context.Context, batchID string, jobs []EnqueueParams) ([]EnqueueResult, error) {
	return c.BatchAddTx(ctx, c.pool, batchID, jobs)
}

// BatchAddTx adds jobs to the open batch batchID in one statement in tx (any DB): they
// are members iff tx commits. Jobs are validated as EnqueueManyTx validates them;
// DeduplicationKey and Unique are refused. ErrBatchSealed once the batch is sealed,
// ErrNotFound if no batch has the id. A transaction that adds to a batch holds
// BatchSeal off until it ends.
func (c *Client) BatchAddTx(ctx context.Context, tx DB, batchID string, jobs []EnqueueParams) ([]EnqueueResult, error) {
	if err := checkDB(ctx, tx); err != nil {
		return nil, err
	}
	if !isUUID(batchID) {
		return nil, invalid("batch", "%q is not a batch id (a UUID)", batchID)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	if len(jobs) > MaxBatchAdd {
		return nil, invalid("jobs", "%d jobs exceed the limit of %d per call", len(jobs), MaxBatchAdd)
	}
	stamp := hostclock.Now()
	nodes := make([]store.FlowNode, len(jobs))
	out := make([]EnqueueResult, len(jobs))
	var queues []string
	seen := map[string]bool{}
	batch, err := parseUUID(batchID)
	if err != nil {
		return nil, err
	}
	for i := range jobs {
		n, err := c.memberParams(ctx, jobs[i], i)
		if err != nil {
			return nil, err
		}
		n.ID, n.BatchID = uuidv7.New(stamp, uint32(i)), &batch
		nodes[i], out[i] = n, EnqueueResult{ID: uuidv7.String(n.ID)}
		if !seen[n.Queue] {
			seen[n.Queue] = true
			queues = append(queues, n.Queue)
		}
	}
	n, err := c.store.BatchAdd(ctx, tx, store.NowParam(c.cfg.Clock), batchID, nodes, c.coalescer.Tx(queues))
	if err != nil {
		return nil, fmt.Errorf("adding %d job(s) to batch %s: %w", len(jobs), batchID, wrapPgError(err))
	}
	if int(n) != len(jobs) {
		if _, gerr := c.store.BatchGet(ctx, tx, batchID); errors.Is(gerr, pgx.ErrNoRows) {
			return nil, fmt.Errorf("adding to batch %s: %w", batchID, ErrBatchNotFound)
		}
		return nil, fmt.Errorf("adding to batch %s: %w", batchID, ErrBatchSealed)
	}
	c.metrics.inserted.Add(n)
	return out, nil
}

// parseUUID turns a validated textual UUID into bytes.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	j := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			continue
		}
		if j >= 32 {
			return u, invalid("id", "%q is not a UUID", s)
		}
		v, ok := hexVal(s[i])
		if !ok {
			return u, invalid("id", "%q is not a UUID", s)
		}
		u[j/2] |= v << (4 * (1 - j%2))
		j++
	}
	if j != 32 {
		return u, invalid("id", "%q is not a UUID", s)
	}
	return u, nil
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// BatchSeal seals a batch in its own transaction on the client's pool, as
// BatchSealTx does in the caller's, and returns the batch as it is then.
func (c *Client) BatchSeal(ctx context.Context, batchID string) (*BatchInfo, error) {
	if err := c.BatchSealTx(ctx, c.pool, batchID); err != nil {
		return nil, err
	}
	return c.BatchGet(ctx, batchID)
}

// BatchSealTx seals the batch batchID in tx: it takes no more members, and its
// OnComplete callback is released once every member has finished — at once if they
// all have. It waits for transactions still adding members. Sealing twice is a
// no-op. ErrNotFound if no batch has the id.
func (c *Client) BatchSealTx(ctx context.Context, tx DB, batchID string) error {
	if err := checkDB(ctx, tx); err != nil {
		return err
	}
	if !isUUID(batchID) {
		return invalid("batch", "%q is not a batch id (a UUID)", batchID)
	}
	found, err := c.store.BatchSeal(ctx, tx, store.NowParam(c.cfg.Clock), batchID)
	if err != nil {
		return fmt.Errorf("sealing batch %s: %w", batchID, wrapPgError(err))
	}
	if !found {
		return fmt.Errorf("sealing batch %s: %w", batchID, ErrBatchNotFound)
	}
	return nil
}

// BatchInfo is a batch as an operator sees it.
type BatchInfo struct {
	ID          string `json:"id"`
	Description string `json:"description,omitempty"`
	// OnComplete and OnFailure are the ids of the callback jobs ("" for none).
	OnComplete string `json:"on_complete,omitempty"`
	OnFailure  string `json:"on_failure,omitempty"`
	// Total is the number of members, known once the batch is sealed (-1 before).
	Total int `json:"total"`
	// Succeeded, Failed and Cancelled count the members that finished so.
	Succeeded int        `json:"succeeded"`
	Failed    int        `json:"failed"`
	Cancelled int        `json:"cancelled"`
	CreatedAt time.Time  `json:"created_at"`
	SealedAt  *time.Time `json:"sealed_at,omitempty"`
	// CompletedAt is when OnComplete was released (every member finished).
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// FailureAt is when OnFailure was released (the first failure).
	FailureAt *time.Time `json:"failure_at,omitempty"`
}

func batchFromRow(r *store.BatchRow) *BatchInfo {
	b := &BatchInfo{ID: r.ID, Description: r.Description, Total: -1, Succeeded: r.Succeeded, Failed: r.Failed,
		Cancelled: r.Cancelled, CreatedAt: r.CreatedAt, SealedAt: r.SealedAt, CompletedAt: r.CompletedAt, FailureAt: r.FailureFiredAt}
	if r.OnComplete != nil {
		b.OnComplete = *r.OnComplete
	}
	if r.OnFailure != nil {
		b.OnFailure = *r.OnFailure
	}
	if r.Total != nil {
		b.Total = *r.Total
	}
	return b
}

// BatchGet returns one batch. ErrNotFound if no batch has the id.
func (c *Client) BatchGet(ctx context.Context, batchID string) (*BatchInfo, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if !isUUID(batchID) {
		return nil, invalid("batch", "%q is not a batch id (a UUID)", batchID)
	}
	r, err := c.store.BatchGet(ctx, c.pool, batchID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("getting batch %s: %w", batchID, ErrBatchNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting batch %s: %w", batchID, wrapPgError(err))
	}
	return batchFromRow(r), nil
}

// BatchMembers counts the members of a batch per state (the members that exist:
// retention may have deleted finished ones).
func (c *Client) BatchMembers(ctx context.Context, batchID string) (map[JobState]int64, error) {
	if _, err := c.BatchGet(ctx, batchID); err != nil {
		return nil, err
	}
	m, err := c.store.BatchMembers(ctx, c.pool, batchID)
	if err != nil {
		return nil, fmt.Errorf("counting the members of batch %s: %w", batchID, wrapPgError(err))
	}
	out := make(map[JobState]int64, len(m))
	for st, n := range m {
		out[JobState(st)] = n
	}
	return out, nil
}

// BatchListParams filter and page BatchList.
type BatchListParams struct {
	// Open keeps the batches whose OnComplete has not been released.
	Open bool
	// BeforeID continues a listing before the last id of the previous page.
	BeforeID string
	// Limit is the page size. Default 100, at most 10,000.
	Limit int
}

// BatchList lists batches, newest first.
func (c *Client) BatchList(ctx context.Context, p BatchListParams) ([]*BatchInfo, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.Limit < 0 || p.Limit > 10000 {
		return nil, invalid("limit", "must be 1..10000")
	}
	if p.BeforeID != "" && !isUUID(p.BeforeID) {
		return nil, invalid("before", "%q is not a batch id (a UUID)", p.BeforeID)
	}
	rows, err := c.store.BatchList(ctx, c.pool, p.BeforeID, p.Limit, p.Open)
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", wrapPgError(err))
	}
	out := make([]*BatchInfo, len(rows))
	for i, r := range rows {
		out[i] = batchFromRow(r)
	}
	return out, nil
}

// BatchResult is what a batch's callback job is told: the batch and its counts when
// the callback was released.
type BatchResult struct {
	BatchID   string `json:"id"`
	Total     int    `json:"total"` // -1 for a failure callback released before the seal
	Succeeded int    `json:"succeeded"`
	Failed    int    `json:"failed"`
	Cancelled int    `json:"cancelled"`
	// Complete is true for OnComplete (every member finished), false for OnFailure.
	Complete bool `json:"complete"`
}

// batchMetadataKey is the Job.Metadata entry in which a batch gives its callback the
// counts.
const batchMetadataKey = "skiplock_batch"

// BatchResultOf returns what the batch told job, its callback; ok is false for a job
// that no batch released.
func BatchResultOf(job *Job) (res BatchResult, ok bool) {
	if job == nil {
		return res, false
	}
	raw, found := job.Metadata[batchMetadataKey]
	if !found {
		return res, false
	}
	var r struct {
		BatchResult
		Total *int `json:"total"`
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return res, false
	}
	res = r.BatchResult
	res.Total = -1
	if r.Total != nil {
		res.Total = *r.Total
	}
	return res, true
}
