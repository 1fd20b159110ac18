package skiplock

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/ident"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/validate"
)

// EachKey is the Limit.Key that limits every concurrency key separately: the default
// for each key that has no Limit of its own.
const EachKey = "*"

// Limit bounds how many jobs of a queue or of a kind run at once, or start per
// period, across every client (docs/limits.md). Limits live in the database: every
// client enforces the same ones, and a change applies at each client's next claim.
//
//	at most 50 jobs of queue "email" running:          Limit{Queue: "email", MaxRunning: 50}
//	at most 5 per tenant (EnqueueOpts.ConcurrencyKey): Limit{Queue: "email", Key: EachKey, MaxRunning: 5}
//	but 20 for tenant "acme":                          Limit{Queue: "email", Key: "acme", MaxRunning: 20}
//	at most 100 "sms" starts per second:               Limit{Kind: "sms", Rate: 100, Per: time.Second}
//
// A job holds a running slot exactly while it runs under an unexpired lease: a
// heartbeat keeps it, its outcome or the lease running out frees it. A crashed or
// frozen worker therefore never leaks a slot — it is free the moment the lease
// expires. Rates are exact sliding windows: no interval of length Per holds more than
// Rate starts (claims). Jobs over a limit wait pending, spending no attempt.
type Limit struct {
	// Queue names the queue the limit governs; or else Kind names the job kind (across
	// every queue). Exactly one is set.
	Queue string `json:"queue,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Key is "" for a limit on all the queue's (or kind's) jobs together, EachKey for
	// a limit on each concurrency key separately, or one concurrency key, whose limit
	// then replaces the EachKey one. A per-key limit does not apply to jobs without
	// a ConcurrencyKey.
	Key string `json:"key,omitempty"`
	// MaxRunning caps the jobs running at once; 0 for no cap. At most MaxLimit.
	MaxRunning int `json:"max_running,omitempty"`
	// Rate caps the starts in any window of length Per; 0 for no cap. At most
	// MaxLimit, Per from 1ms to 24h.
	Rate int           `json:"rate,omitempty"`
	Per  time.Duration `json:"per,omitempty"`
	// UpdatedAt is when the limit was last set (LimitList fills it; ignored by LimitSet).
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// RateStartSlack is how long after its claim a job under a rate limit may start its
// handler. A rate limit holds on handler starts — no window of length Per holds more
// than Rate of them — because a claim counts the starts of Per plus this slack, and a
// job whose handler cannot start within the slack of its claim (every worker busy) is
// handed back to pending with its attempt given back. A limit of Rate per Per thus
// runs at most Rate per (Per + RateStartSlack): 5 per second is at most 5 per 1.05 s.
const RateStartSlack = store.RateStartSlack

// MaxLimit bounds Limit.MaxRunning and Limit.Rate.
const MaxLimit = 1_000_000

// MaxConcurrencyKeyLen bounds EnqueueOpts.ConcurrencyKey and Limit.Key, in bytes.
const MaxConcurrencyKeyLen = 255

// String describes the limit in the CLI's terms, e.g. "queue email key * max-running 5".
func (l Limit) String() string {
	s := "queue " + l.Queue
	if l.Kind != "" {
		s = "kind " + l.Kind
	}
	if l.Key != "" {
		s += " key " + l.Key
	}
	if l.MaxRunning > 0 {
		s += fmt.Sprintf(" max-running %d", l.MaxRunning)
	}
	if l.Rate > 0 {
		s += fmt.Sprintf(" rate %d/%s", l.Rate, l.Per)
	}
	return s
}

// scope returns the store's (scope, target) of the limit after checking which of
// Queue and Kind is set.
func (l Limit) scope() (scope, target string, err error) {
	switch {
	case l.Queue != "" && l.Kind != "":
		return "", "", invalid("limit", "set Queue or Kind, not both")
	case l.Queue != "":
		if err := ident.ValidateQueue(l.Queue); err != nil {
			return "", "", invalid("queue", "%v", err)
		}
		return "queue", l.Queue, nil
	case l.Kind != "":
		if err := validateKind(l.Kind); err != nil {
			return "", "", err
		}
		return "kind", l.Kind, nil
	}
	return "", "", invalid("limit", "set Queue or Kind")
}

func validateLimitKey(key string) error {
	if key == "" || key == EachKey {
		return nil
	}
	return validateConcurrencyKey("key", key)
}

func validateConcurrencyKey(field, key string) error {
	if key == EachKey {
		return invalid(field, "%q is reserved for Limit.Key (every key)", EachKey)
	}
	if reason := validate.Name(key, MaxConcurrencyKeyLen, true); reason != "" {
		return invalid(field, "%s", reason)
	}
	return nil
}

// Validate reports the first thing wrong with l as a *ValidationError naming the
// field, or nil.
func (l Limit) Validate() error {
	if _, _, err := l.scope(); err != nil {
		return err
	}
	if err := validateLimitKey(l.Key); err != nil {
		return err
	}
	switch {
	case l.MaxRunning < 0 || l.MaxRunning > MaxLimit:
		return invalid("max_running", "%d is outside 0..%d", l.MaxRunning, MaxLimit)
	case l.Rate < 0 || l.Rate > MaxLimit:
		return invalid("rate", "%d is outside 0..%d", l.Rate, MaxLimit)
	case l.MaxRunning == 0 && l.Rate == 0:
		return invalid("limit", "set MaxRunning, Rate or both (LimitDelete removes a limit)")
	case l.Rate > 0 && (l.Per < time.Millisecond || l.Per > 24*time.Hour):
		return invalid("per", "%s is outside 1ms..24h (the rate's window)", l.Per)
	case l.Rate == 0 && l.Per != 0:
		return invalid("per", "set only with Rate")
	}
	return nil
}

// LimitSet adds a limit, or replaces the one with the same Queue or Kind and Key. It
// wakes every client (NOTIFY) so they claim under the new limit at once; a client
// that misses the NOTIFY still honours the limit from its next claim on, and runs
// the limited claim within a PollInterval.
func (c *Client) LimitSet(ctx context.Context, l Limit) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil")
	}
	if err := l.Validate(); err != nil {
		return err
	}
	// The Citus layout refuses limits (citusRefusals): say so by name rather than
	// with the planner's error.
	if err := c.refuseOnCitus(ctx, fmt.Sprintf("setting limit (%s)", l), "limits (Client.LimitSet)", "a limit counts running jobs across keys"); err != nil {
		return err
	}
	scope, target, _ := l.scope()
	_, err := c.store.LimitSet(ctx, c.pool, store.NowParam(c.cfg.Clock), store.LimitRow{
		Scope: scope, Target: target, Key: l.Key, MaxRunning: l.MaxRunning, Rate: l.Rate, Per: l.Per,
	}, c.channel)
	if err != nil {
		return fmt.Errorf("setting limit (%s): %w", l, wrapPgError(err))
	}
	return nil
}

// LimitDelete removes the limit with l's Queue or Kind and Key (its figures are
// ignored) and reports whether there was one.
func (c *Client) LimitDelete(ctx context.Context, l Limit) (bool, error) {
	if ctx == nil {
		return false, invalid("ctx", "must not be nil")
	}
	scope, target, err := l.scope()
	if err != nil {
		return false, err
	}
	if err := validateLimitKey(l.Key); err != nil {
		return false, err
	}
	ok, err := c.store.LimitDelete(ctx, c.pool, scope, target, l.Key, c.channel)
	if err != nil {
		return false, fmt.Errorf("deleting limit (%s): %w", l, wrapPgError(err))
	}
	return ok, nil
}

// LimitList lists every limit: queue limits first, then kind limits, by name and key.
func (c *Client) LimitList(ctx context.Context) ([]Limit, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	rows, err := c.store.Limits(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("listing limits: %w", wrapPgError(err))
	}
	out := make([]Limit, len(rows))
	for i, r := range rows {
		out[i] = limitFromRow(r)
	}
	return out, nil
}

func limitFromRow(r store.LimitRow) Limit {
	l := Limit{Key: r.Key, MaxRunning: r.MaxRunning, Rate: r.Rate, Per: r.Per, UpdatedAt: r.UpdatedAt}
	if r.Scope == "queue" {
		l.Queue = r.Target
	} else {
		l.Kind = r.Target
	}
	return l
}

// LimitUsage is how much of a limit one bucket uses now.
type LimitUsage struct {
	// Limit is the limit that applies (for an EachKey limit, Key is EachKey).
	Limit Limit `json:"limit"`
	// Bucket is the concurrency key the figures count, "" for a limit on all jobs.
	Bucket string `json:"bucket,omitempty"`
	// Holding counts the bucket's jobs holding one of its slots: leased (claimed or
	// running) under an unexpired lease, a limit slot's waiting successor excepted.
	Holding int64 `json:"holding"`
	// Started counts the bucket's starts within the last Limit.Per (rate limits).
	Started int64 `json:"started,omitempty"`
}

// LimitUsages reports, cluster-wide, each limit's use: one entry per limit, and for
// an EachKey limit one per key that is running jobs or started any within its window.
// On the Citus layout, where limits are refused, it reports nothing when no limit
// exists, and ErrNotOnCitus when one was set before the schema was distributed (its
// usage counts jobs across keys, which no statement there can).
func (c *Client) LimitUsages(ctx context.Context) ([]LimitUsage, error) {
	if ctx == nil {
		return nil, invalid("ctx", "must not be nil")
	}
	dist, err := c.store.Distributed(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("reading limit usage: %w", wrapPgError(err))
	}
	if dist {
		limits, err := c.store.Limits(ctx, c.pool)
		if err != nil {
			return nil, fmt.Errorf("reading limit usage: %w", wrapPgError(err))
		}
		if len(limits) > 0 {
			return nil, c.notOnCitus("limit usage (LimitUsages, skiplock limits usage)", "a limit counts running jobs across keys")
		}
		return []LimitUsage{}, nil
	}
	rows, err := c.store.LimitUsages(ctx, c.pool, store.NowParam(c.cfg.Clock))
	if err != nil {
		return nil, fmt.Errorf("reading limit usage: %w", wrapPgError(err))
	}
	out := make([]LimitUsage, len(rows))
	for i, r := range rows {
		out[i] = LimitUsage{Limit: limitFromRow(r.LimitRow), Bucket: r.Bucket, Holding: r.Running, Started: r.Started}
	}
	return out, nil
}

// applyConfigLimits sets Config.Limits (Start calls it before claiming anything).
func (c *Client) applyConfigLimits(ctx context.Context) error {
	for _, l := range c.cfg.Limits {
		if err := c.LimitSet(ctx, l); err != nil {
			return fmt.Errorf("skiplock: writing Config.Limits: %w", err)
		}
	}
	return nil
}
