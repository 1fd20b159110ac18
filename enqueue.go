package skiplock

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/uuidv7"
	"github.com/skiplock/skiplock/internal/validate"
)

// Limits on enqueue input. Values outside them are refused with a *ValidationError.
const (
	MinPriority    = -1000 // lowest priority; higher runs first
	MaxPriority    = 1000
	MaxMaxAttempts = 1000
	MaxKindLen     = 255
	MaxDedupKeyLen = 512
	// MaxMetadataEntries, MaxMetadataKeyLen and MaxMetadataValueLen bound
	// EnqueueOpts.Metadata.
	MaxMetadataEntries  = 64
	MaxMetadataKeyLen   = 255
	MaxMetadataValueLen = 4096
	DefaultMaxPayload   = 1 << 20 // bytes; Config.MaxPayloadBytes
	// MaxSchedule bounds how far from now RunAt and Delay may point.
	MaxSchedule = 10 * 365 * 24 * time.Hour
)

// JobArgs is a typed job payload: its Kind names the worker that runs it, and it is
// stored as JSON.
type JobArgs interface {
	Kind() string
}

// EnqueueOpts are per-job options. The zero value means: queue "default", priority 0,
// due now, max attempts of the kind's worker (or 8), no deduplication.
type EnqueueOpts struct {
	// Queue the job goes to. Default "default".
	Queue string
	// Priority, MinPriority..MaxPriority; higher is claimed first. Default 0.
	Priority int
	// RunAt schedules the job; zero means now. Wins over Delay.
	RunAt time.Time
	// Delay schedules the job at the statement's now + Delay.
	Delay time.Duration
	// MaxAttempts before the job fails for good, 1..MaxMaxAttempts. Default: the
	// kind's WorkerOpts.MaxAttempts, else 8.
	MaxAttempts int
	// Metadata are small string key/value pairs stored with the job and returned as
	// Job.Metadata: a tenant, a request id, the caller's trace context (see
	// Config.EnqueueHooks). At most MaxMetadataEntries, keys as job kinds (no control
	// characters, at most MaxMetadataKeyLen bytes), values valid UTF-8 without NUL of
	// at most MaxMetadataValueLen bytes. Default none.
	Metadata map[string]string
	// Tags label the job for operators: the dashboard and JobList filter by tag. At
	// most MaxTags of MaxTagLen bytes, no control characters. Default none.
	Tags []string
	// ConcurrencyKey is the key per-key limits count the job under (Limit with a
	// Key): a tenant, an API account. At most MaxConcurrencyKeyLen bytes, no control
	// characters, not EachKey. Default none: only limits on the whole queue or kind
	// apply.
	ConcurrencyKey string
	// Sequence, when set, makes the job run only after every earlier job of its
	// sequence has finished: see SequenceOpts.
	Sequence *SequenceOpts
	// Unique, when set, keeps at most one job of this kind per unique key in the
	// chosen states (and, with a Period, per period): see UniqueOpts. It is the
	// uniqueness to reach for first. It cannot be combined with DeduplicationKey.
	Unique *UniqueOpts
	// DeduplicationKey, when set, makes (kind, key) unique: a second enqueue with the
	// same pair inserts nothing and returns the id of the job holding the key. The key
	// is held as long as that job's row exists — pending, running and also after it
	// finished (succeeded, failed or cancelled) until retention deletes the row
	// (RetentionConfig, 7 days by default) or JobDelete removes it; with
	// Config.DeleteOnSuccess a success frees the key at once. At most MaxDedupKeyLen
	// bytes of valid UTF-8. It fits an enqueue that must be idempotent for an event
	// (one job per delivery or message id, however often it is retried) and enqueues
	// from SQL; to keep work from being queued twice, use Unique (docs/scheduling.md).
	DeduplicationKey string
}

// EnqueueHook amends a job before it is validated and inserted (Config.EnqueueHooks):
// the tracing package, for one, adds the caller's trace context to its metadata. A
// hook gets a copy of the caller's parameters; to add metadata it should use
// SetMetadata, which copies the map rather than writing into one the caller may
// share. An error refuses the whole enqueue.
type EnqueueHook func(ctx context.Context, p *EnqueueParams) error

// SetMetadata sets p.Opts.Metadata[key] = value on a copy of the map.
func SetMetadata(p *EnqueueParams, key, value string) {
	m := make(map[string]string, len(p.Opts.Metadata)+1)
	for k, v := range p.Opts.Metadata {
		m[k] = v
	}
	m[key] = value
	p.Opts.Metadata = m
}

// UniqueOpts make an enqueue insert nothing while another job of the same kind holds
// the same unique key — and return that job's id, as a deduplicated enqueue does.
// Unlike DeduplicationKey, which is held as long as the job's row exists, a unique
// key is held only while its job is in one of States, and per Period:
//
//	skip if one is waiting or running:  &UniqueOpts{Key: "sync-42"}  (States default)
//	one per key until it succeeds:      &UniqueOpts{Key: k, States: []JobState{StatePending, StateRunning, StateFailed, StateCancelled}}
//	at most one per key per hour:       &UniqueOpts{Key: k, Period: time.Hour}
//
// The check is race-free under concurrent enqueuers (the key is taken in the insert
// statement, on a unique index), works in EnqueueMany batches and in both table
// layouts, and costs nothing for jobs enqueued without it.
type UniqueOpts struct {
	// Key names the work; at most MaxDedupKeyLen bytes of valid UTF-8. Required
	// unless ByArgs.
	Key string
	// ByArgs uses the job's payload as the key (its SHA-256), so two jobs are the
	// same work when their arguments are equal. Key, if also set, is prefixed.
	ByArgs bool
	// States in which a job holds its key. Default: pending and running without a
	// Period (a new job may be enqueued once the last one finished); every state
	// with a Period (at most one job per period, whatever became of it). Claimed and
	// running are one stored state here: naming either holds the key in both.
	States []JobState
	// Period, when positive, makes the key per period: periods are aligned to the
	// Unix epoch on the statement's clock (Config.Clock, else the database's), and a
	// job enqueued in a later period is a different key. At least 1s.
	Period time.Duration
}

// SequenceOpts put a job in a sequence: jobs with the same Key run one at a time, in
// enqueue order, across every client and queue — the next starts only once the
// previous one finished (succeeded, was cancelled, or failed and SkipFailed was set
// on it). Retries and snoozes keep the job at the head of its sequence. A worker that
// crashes holds its sequence only until its lease expires and the reclaimer returns
// the job. Jobs without a sequence pay nothing for the feature.
//
// Enqueue order is the order in which jobs of the sequence commit: enqueues into the
// same sequence take a transaction-scoped advisory lock on its key, so a transaction
// enqueueing into a busy sequence waits for the other such transactions to end.
type SequenceOpts struct {
	// Key names the sequence (a customer, an aggregate id); at most MaxDedupKeyLen
	// bytes of valid UTF-8.
	Key string
	// SkipFailed lets the sequence go on past this job should it fail for good; by
	// default a failed job blocks its sequence until an operator retries or cancels
	// it (skiplock jobs retry|cancel).
	SkipFailed bool
}

// sequenceParams validates q and sets the sequence fields of p.
func sequenceParams(q *SequenceOpts, p *store.InsertParams) error {
	if q == nil {
		return nil
	}
	if q.Key == "" || len(q.Key) > MaxDedupKeyLen || !utf8.ValidString(q.Key) || strings.IndexByte(q.Key, 0) >= 0 {
		return invalid("sequence", "Key must be non-empty valid UTF-8 without NUL of at most %d bytes", MaxDedupKeyLen)
	}
	k := q.Key
	p.SequenceKey, p.SequenceSkipFailed = &k, q.SkipFailed
	return nil
}

// uniqueParams validates u and sets the unique fields of p.
func uniqueParams(u *UniqueOpts, payload []byte, p *store.InsertParams) error {
	if u == nil {
		return nil
	}
	if p.DedupKey != nil {
		return invalid("unique", "cannot be combined with DeduplicationKey")
	}
	key := u.Key
	if u.ByArgs {
		sum := sha256.Sum256(payload)
		key += "args:" + hex.EncodeToString(sum[:])
	}
	if key == "" {
		return invalid("unique", "set Key, ByArgs or both")
	}
	if len(key) > MaxDedupKeyLen+72 || !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return invalid("unique", "Key must be valid UTF-8 without NUL of at most %d bytes", MaxDedupKeyLen)
	}
	if u.Period < 0 || (u.Period > 0 && u.Period < time.Second) || u.Period > MaxSchedule {
		return invalid("unique", "Period %s is outside 1s..%s (0 for none)", u.Period, MaxSchedule)
	}
	states := u.States
	if len(states) == 0 {
		states = []JobState{StatePending, StateRunning}
		if u.Period > 0 {
			states = JobStates
		}
	}
	seen := map[JobState]bool{}
	for _, st := range states {
		if _, err := ParseJobState(string(st)); err != nil {
			return invalid("unique", "States: %v", err)
		}
		if st == StateClaimed {
			st = StateRunning // one stored state: a claimed job holds a key as a running one does
		}
		if !seen[st] {
			seen[st] = true
			p.UniqueStates = append(p.UniqueStates, string(st))
		}
	}
	if !seen[StatePending] {
		return invalid("unique", "States must include pending: a new job is pending, so it could never hold its key")
	}
	p.UniqueKey, p.UniquePeriod = &key, u.Period
	return nil
}

// EnqueueResult tells what an enqueue did.
type EnqueueResult struct {
	// ID of the inserted job, or of the job that already holds the deduplication key.
	ID string
	// Duplicate is true when nothing was inserted because another job holds the
	// deduplication key or the unique key.
	Duplicate bool
}

// EnqueueParams is one job of EnqueueManyTx.
type EnqueueParams struct {
	Kind    string
	Payload []byte // JSON; use Args for a typed payload
	Args    JobArgs
	Opts    EnqueueOpts
}

// EnqueueTx inserts a job for args in tx (any DB). The job exists iff tx commits.
func (c *Client) EnqueueTx(ctx context.Context, tx DB, args JobArgs, opts *EnqueueOpts) (EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, tx, []EnqueueParams{{Args: args, Opts: deref(opts)}})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// Enqueue inserts a job in its own transaction on the client's pool.
func (c *Client) Enqueue(ctx context.Context, args JobArgs, opts *EnqueueOpts) (EnqueueResult, error) {
	return c.EnqueueTx(ctx, c.pool, args, opts)
}

// EnqueueRawTx inserts a job with an untyped JSON payload.
func (c *Client) EnqueueRawTx(ctx context.Context, tx DB, kind string, payload []byte, opts *EnqueueOpts) (EnqueueResult, error) {
	res, err := c.EnqueueManyTx(ctx, tx, []EnqueueParams{{Kind: kind, Payload: payload, Opts: deref(opts)}})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueRaw inserts a job with an untyped JSON payload in its own transaction on
// the client's pool.
func (c *Client) EnqueueRaw(ctx context.Context, kind string, payload []byte, opts *EnqueueOpts) (EnqueueResult, error) {
	return c.EnqueueRawTx(ctx, c.pool, kind, payload, opts)
}

// EnqueueMany inserts a batch in its own transaction on the client's pool, as
// EnqueueManyTx does in the caller's.
func (c *Client) EnqueueMany(ctx context.Context, jobs []EnqueueParams) ([]EnqueueResult, error) {
	return c.EnqueueManyTx(ctx, c.pool, jobs)
}

// EnqueueManyTx inserts a batch in one statement (one round trip), with the same
// validation and deduplication as EnqueueTx. Results are in input order. Either every
// job is valid and the batch is written, or nothing is.
func (c *Client) EnqueueManyTx(ctx context.Context, tx DB, jobs []EnqueueParams) ([]EnqueueResult, error) {
	if err := checkDB(ctx, tx); err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	ps := make([]store.InsertParams, len(jobs))
	queues := make([]string, 0, 1)
	var seen map[string]bool // queues already listed, once there are two jobs
	for i := range jobs {
		jp := jobs[i] // hooks amend a copy, never the caller's slice
		for _, h := range c.cfg.EnqueueHooks {
			if err := h(ctx, &jp); err != nil {
				return nil, fmt.Errorf("job %d: enqueue hook: %w", i, err)
			}
		}
		p, err := c.insertParams(&jp)
		if err != nil {
			if len(jobs) > 1 {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
			return nil, err
		}
		ps[i] = p
		if i == 0 {
			queues = append(queues, p.Queue)
			continue
		}
		if seen == nil {
			seen = map[string]bool{queues[0]: true}
		}
		if !seen[p.Queue] {
			seen[p.Queue] = true
			queues = append(queues, p.Queue)
		}
	}
	now := store.NowParam(c.cfg.Clock)
	var (
		results []store.InsertResult
		err     error
	)
	_, own := tx.(*pgxpool.Pool)
	notify, done := c.coalescer.Queues(queues, own)
	defer done()
	// On Citus, a batch over several keys takes their key-table rows in key order
	// first: two concurrent batches over the same new keys deadlocked otherwise.
	if err := c.store.CitusHoldKeys(ctx, tx, now, ps); err != nil {
		return nil, fmt.Errorf("enqueueing %d job(s): %w", len(ps), wrapPgError(err))
	}
	if copier, ok := tx.(store.Copier); ok && store.CanCopy(tx) && len(ps) >= copyThreshold {
		if out, ok, err := c.copyInsert(ctx, copier, tx, ps, queues, notify); ok || err != nil {
			return out, err
		}
	}
	if len(ps) == 1 {
		// On the pool the insert is its own transaction: its job is all the
		// transaction wrote, so it records no lineage row (JobsByTx).
		ps[0].Solo = own
		// A job without keys gets its id here (used by the plain insert only): the
		// server then runs no id default and returns nothing (issue #49).
		if p := &ps[0]; p.DedupKey == nil && p.UniqueKey == nil && p.SequenceKey == nil {
			id := uuidv7.String(uuidv7.New(hostclock.Now(), 0))
			p.ID = &id
		}
		var r store.InsertResult
		r, err = c.store.Insert(ctx, tx, now, ps[0], notify)
		results = []store.InsertResult{r}
	} else {
		results, err = c.store.InsertMany(ctx, tx, now, ps, notify)
	}
	if err != nil {
		return nil, fmt.Errorf("enqueueing %d job(s): %w", len(ps), wrapPgError(err))
	}
	out := make([]EnqueueResult, len(results))
	inserted := 0
	for i, r := range results {
		out[i] = EnqueueResult{ID: r.ID, Duplicate: !r.Inserted}
		if r.Inserted {
			inserted++
		}
	}
	c.metrics.inserted.Add(int64(inserted))
	return out, nil
}

func deref(o *EnqueueOpts) EnqueueOpts {
	if o == nil {
		return EnqueueOpts{}
	}
	return *o
}

// insertParams validates one job and turns it into store parameters.
func (c *Client) insertParams(j *EnqueueParams) (store.InsertParams, error) {
	kind, payload := j.Kind, j.Payload
	marshalled := false
	if j.Args != nil {
		kind = j.Args.Kind()
		b, err := json.Marshal(j.Args)
		if err != nil {
			return store.InsertParams{}, invalid("payload", "encoding %T as JSON: %v", j.Args, err)
		}
		payload, marshalled = b, true
	}
	if err := validateKind(kind); err != nil {
		return store.InsertParams{}, err
	}
	if err := validatePayload(payload, c.cfg.MaxPayloadBytes, !marshalled); err != nil {
		return store.InsertParams{}, err
	}
	o := j.Opts
	p := store.InsertParams{Kind: kind, Payload: payload, Priority: o.Priority, Queue: o.Queue, MaxAttempts: o.MaxAttempts, Delay: o.Delay}
	meta, err := encodeMetadata(o.Metadata)
	if err != nil {
		return store.InsertParams{}, err
	}
	p.Metadata = meta
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	if err := ident.ValidateQueue(p.Queue); err != nil {
		return store.InsertParams{}, invalid("queue", "%v", err)
	}
	if p.Priority < MinPriority || p.Priority > MaxPriority {
		return store.InsertParams{}, invalid("priority", "%d is outside %d..%d", p.Priority, MinPriority, MaxPriority)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = c.workers.maxAttempts(kind)
	}
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxMaxAttempts {
		return store.InsertParams{}, invalid("max_attempts", "%d is outside 1..%d", p.MaxAttempts, MaxMaxAttempts)
	}
	if o.Delay < 0 || o.Delay > MaxSchedule {
		return store.InsertParams{}, invalid("delay", "%s is outside 0..%s", o.Delay, MaxSchedule)
	}
	if !o.RunAt.IsZero() {
		ref := hostclock.Now()
		if c.cfg.Clock != nil {
			ref = c.cfg.Clock.Now()
		}
		if d := o.RunAt.Sub(ref); d > MaxSchedule || d < -MaxSchedule {
			return store.InsertParams{}, invalid("run_at", "%s is more than %s from now", o.RunAt.Format(time.RFC3339), MaxSchedule)
		}
		t := o.RunAt
		p.RunAt = &t
	}
	if o.DeduplicationKey != "" {
		if len(o.DeduplicationKey) > MaxDedupKeyLen || !utf8.ValidString(o.DeduplicationKey) {
			return store.InsertParams{}, invalid("deduplication_key", "must be valid UTF-8 of at most %d bytes", MaxDedupKeyLen)
		}
		k := o.DeduplicationKey
		p.DedupKey = &k
	}
	if err := uniqueParams(o.Unique, payload, &p); err != nil {
		return store.InsertParams{}, err
	}
	if err := sequenceParams(o.Sequence, &p); err != nil {
		return store.InsertParams{}, err
	}
	if p.Tags, err = validateTags(o.Tags); err != nil {
		return store.InsertParams{}, err
	}
	if err := validateConcurrencyKey("concurrency_key", o.ConcurrencyKey); err != nil {
		return store.InsertParams{}, err
	}
	p.ConcurrencyKey = o.ConcurrencyKey
	return p, nil
}

func validateKind(kind string) error {
	if reason := validate.Name(kind, MaxKindLen, false); reason != "" {
		return invalid("kind", "%s", reason)
	}
	return nil
}

// ValidatePayload checks what PostgreSQL's jsonb would refuse — and the size limit —
// before the database sees it: empty input, more than limit bytes, invalid JSON, and
// strings (values or keys) containing \u0000. It returns a *ValidationError on
// "payload". The outbox validates event payloads with it too.
func ValidatePayload(p []byte, limit int) error { return validatePayload(p, limit, true) }

// validatePayload is ValidatePayload; syntax false skips the check of p's JSON syntax,
// for a payload json.Marshal produced (valid JSON by construction, and json.Valid was
// a second pass over every typed payload: issue #49).
func validatePayload(p []byte, limit int, syntax bool) error {
	if len(p) == 0 {
		return invalid("payload", "empty (use {} or null for no data)")
	}
	if len(p) > limit {
		return invalid("payload", "%d bytes exceeds the limit of %d (MaxPayloadBytes)", len(p), limit)
	}
	if syntax && !json.Valid(p) {
		return invalid("payload", "not valid JSON")
	}
	if bytes.Contains(p, []byte(`\u0000`)) && hasNULEscape(p) {
		return invalid("payload", `contains \u0000, which PostgreSQL's jsonb cannot store`)
	}
	return nil
}

// hasNULEscape reports whether a JSON string in p decodes to a NUL character (as
// opposed to the literal text `\u0000`, escaped as `\\u0000`).
func hasNULEscape(p []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(p))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && bytes.IndexByte([]byte(s), 0) >= 0 {
			return true
		}
	}
}

// encodeMetadata validates job metadata and encodes it as a JSON object (nil for none).
func encodeMetadata(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if len(m) > MaxMetadataEntries {
		return nil, invalid("metadata", "%d entries exceed the limit of %d", len(m), MaxMetadataEntries)
	}
	for k, v := range m {
		if reason := validate.Name(k, MaxMetadataKeyLen, false); reason != "" {
			return nil, invalid("metadata", "key %q: %s", k, reason)
		}
		if len(v) > MaxMetadataValueLen || !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return nil, invalid("metadata", "value of %q must be valid UTF-8 without NUL of at most %d bytes", k, MaxMetadataValueLen)
		}
	}
	b, err := json.Marshal(m)
	if err != nil { // cannot happen for valid strings
		return nil, invalid("metadata", "encoding as JSON: %v", err)
	}
	return b, nil
}
