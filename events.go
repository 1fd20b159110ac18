package skiplock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// EventKind names what happened to a job in a started client.
type EventKind string

// The events a started client emits, one per job outcome.
const (
	EventSucceeded EventKind = "succeeded"
	EventRetried   EventKind = "retried" // pending again after a delay
	EventFailed    EventKind = "failed"  // permanent error, exhausted attempts, unknown kind
	EventSnoozed   EventKind = "snoozed"
	EventCancelled EventKind = "cancelled"
	EventLeaseLost EventKind = "lease_lost" // the outcome was not written
)

// Event reports one job outcome after it is durable (or, for EventLeaseLost, after
// it was discarded).
type Event struct {
	Kind EventKind
	// Job as claimed (State is the state the job is now in, for written outcomes).
	Job *Job
	// Err is what the handler returned: nil on success, except for a handler that
	// returned an error after its CompleteTx committed — the completion stands, so
	// the event is EventSucceeded and Err says what the handler returned.
	Err error
	// RunDuration is how long the handler ran.
	RunDuration time.Duration
	// QueueWait is how long the job waited from due (run_at) to start, by the clock
	// in use (the host clock when none was injected).
	QueueWait time.Duration
}

// eventBufferSize is each subscription's buffer; a subscriber that falls further
// behind misses events (counted in Stats.EventsDropped) rather than stalling workers.
const eventBufferSize = 4096

type subscription struct {
	ch    chan *Event
	kinds map[EventKind]bool
}

type eventHub struct {
	mu      sync.RWMutex
	subs    map[*subscription]struct{}
	dropped atomic.Int64
}

// Subscribe returns a channel of job outcome events (all kinds when none are given)
// and a function that ends the subscription and closes the channel.
func (c *Client) Subscribe(kinds ...EventKind) (<-chan *Event, func()) {
	s := &subscription{ch: make(chan *Event, eventBufferSize)}
	if len(kinds) > 0 {
		s.kinds = map[EventKind]bool{}
		for _, k := range kinds {
			s.kinds[k] = true
		}
	}
	c.events.mu.Lock()
	if c.events.subs == nil {
		c.events.subs = map[*subscription]struct{}{}
	}
	c.events.subs[s] = struct{}{}
	c.events.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			c.events.mu.Lock()
			delete(c.events.subs, s)
			c.events.mu.Unlock()
			close(s.ch)
		})
	}
}

func (c *Client) emit(e *Event) {
	c.events.mu.RLock()
	defer c.events.mu.RUnlock()
	for s := range c.events.subs {
		if s.kinds != nil && !s.kinds[e.Kind] {
			continue
		}
		select {
		case s.ch <- e:
		default:
			c.events.dropped.Add(1)
		}
	}
}

type (
	ctxKey    struct{}
	clientKey struct{}
)

// ContextWithJob returns a copy of ctx carrying job, as the context a client gives a
// handler does, so JobFromContext and IdempotencyKey find it: for tests
// (skiplocktest.Work) and loops built on Manual. A job a client claimed (Manual.Claim)
// brings that client along, for ClientFromContext.
func ContextWithJob(ctx context.Context, job *Job) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, ctxKey{}, job)
}

// ContextWithClient returns a copy of ctx carrying client, for ClientFromContext in
// a handler run outside a client's own loop (skiplocktest.WorkOpts.Client does this);
// it takes precedence over the client a job in ctx was claimed by. A client's
// handlers need nothing of the kind: their context carries the client.
func ContextWithClient(ctx context.Context, client *Client) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, clientKey{}, client)
}

// ClientFromContext returns the client running the handler whose context ctx is, so
// a handler reaches Children, EnqueueTx or JobGet without a global: every handler a
// client runs has it, as do contexts made by ContextWithJob for a job Manual.Claim
// returned, and by ContextWithClient. ok is false outside them (and for a nil ctx).
func ClientFromContext(ctx context.Context) (client *Client, ok bool) {
	if ctx == nil {
		return nil, false
	}
	if c, _ := ctx.Value(clientKey{}).(*Client); c != nil {
		return c, true
	}
	// The client rides on the job, so the handler's context costs no second value.
	if j := JobFromContext(ctx); j != nil && j.client != nil {
		return j.client, true
	}
	return nil, false
}

// JobFromContext returns the job a handler's context belongs to, or nil.
func JobFromContext(ctx context.Context) *Job {
	if ctx == nil {
		return nil
	}
	j, _ := ctx.Value(ctxKey{}).(*Job)
	return j
}

// IdempotencyKey returns the running job's IdempotencyKey from a handler's context
// ("" outside a handler).
func IdempotencyKey(ctx context.Context) string {
	if j := JobFromContext(ctx); j != nil {
		return j.IdempotencyKey()
	}
	return ""
}

// Middleware wraps job execution (logging, metrics, tracing). The first middleware
// in Config.Middleware is the outermost.
type Middleware func(next HandlerFunc) HandlerFunc
