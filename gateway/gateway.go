// Package gateway is the HTTP worker gateway: workers in any language claim, renew
// and finish skiplock jobs as JSON over HTTP, with the guarantees a Go worker has —
// every call for a job is fenced by its lease token. It is an http.Handler to mount
// in an application's own server, or run alone with `skiplock serve`
// (docs/gateway.md).
//
//	g, err := gateway.New(client, gateway.Options{
//		Tokens: []gateway.Token{{Worker: "billing-py", Token: os.Getenv("BILLING_TOKEN"), Queues: []string{"billing"}}},
//	})
//	err = g.Start(ctx) // the LISTEN connection, the finishers and any push targets
//	mux.Handle("/jobs-gateway/", http.StripPrefix("/jobs-gateway", g))
//	defer g.Stop(context.Background())
//
// # Routes
//
//	POST /v1/claim                  claim up to limit jobs of a queue, waiting up to wait_ms for one (long poll)
//	POST /v1/heartbeat              renew many leases; answers which were renewed and which lost
//	POST /v1/jobs/{id}/heartbeat    renew one lease
//	POST /v1/complete               succeed many jobs at once; answers which succeeded and which lost
//	POST /v1/jobs/{id}/complete     succeed, with an output
//	POST /v1/jobs/{id}/fail         fail the attempt: retried per the job's policy (or after retry_in_ms), or permanently
//	POST /v1/jobs/{id}/snooze       pending again after delay_ms, the attempt given back
//	POST /v1/jobs/{id}/cancel       cancelled
//	GET  /openapi.json              the OpenAPI 3.1 document of all of the above (OpenAPIPath)
//
// A call under a lease token that no longer holds the job (it expired and the job
// was reclaimed, an operator cancelled it, the job already finished) writes nothing
// and answers 409 with the code lease_lost: the worker drops the job. Every other
// refusal is a 4xx with an ErrorResponse naming the code (the Code constants) and,
// where one is at fault, the field.
//
// # Long poll
//
// Claim requests of a queue wait together: while any waits, the gateway holds one
// claim statement in flight for the sum of what they ask, plus what the previous
// round asked (at most Options.MaxClaimBatch), and hands the jobs out in arrival
// order; the jobs claimed ahead answer the requests that arrive meanwhile at once,
// and go back to the queue (attempt given back) if none asks within the poll
// interval (at most a tenth of the lease). A waiting request costs no query: the gateway's LISTEN connection (the client's NOTIFY, sent by
// every enqueue) wakes the queue's claim, and Options.PollInterval is only the
// safety net, one claim per queue with waiters per interval however many wait.
//
// # Finishing
//
// Finishing calls that arrive together are written together, in one fenced
// statement (skiplock.Manual.FinishMany), each answered with its own result. A
// worker that batches its successes sends them in one POST /v1/complete: one
// request, and one share of a statement, for many jobs.
//
// # Push mode
//
// For serverless workers, Options.Push registers URLs the gateway POSTs each job of
// a queue to (PushRequest), signed like the webhook publisher's messages (Standard
// Webhooks: webhookpub.Verify checks them), heartbeating the job's lease while it
// waits. The receiver's answer is the outcome (PushReply), or 202 Accepted and a
// later call of the routes above with the job's lease token.
//
// # Security
//
// Every request must authenticate: by a per-worker bearer token (Options.Tokens,
// each optionally limited to some queues), by Options.Authorize, or by the
// application in front of the handler (Options.Unauthenticated, said explicitly).
// Request bodies are limited to Options.MaxBodyBytes, claims to Options.MaxClaim
// jobs and Options.MaxWait.
package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/notify"
)

// OpenAPIPath is where the gateway serves its OpenAPI document.
const OpenAPIPath = "/openapi.json"

// MinTokenLen is the shortest bearer token Options.Tokens accepts: a guessable token
// would be worse than none.
const MinTokenLen = 16

// Defaults and bounds of Options.
const (
	DefaultMaxBodyBytes  = 256 << 10
	DefaultMaxClaim      = 100
	DefaultMaxWait       = 30 * time.Second
	DefaultMaxClaimBatch = 1000
	DefaultPollInterval  = time.Second
	// MaxMaxWait bounds Options.MaxWait: a longer request outlives most proxies'
	// idle timeouts.
	MaxMaxWait = 5 * time.Minute
)

// Token is one worker's bearer token.
type Token struct {
	// Worker names the worker in logs and to Authorize-free deployments. Required.
	Worker string
	// Token is the secret, sent as "Authorization: Bearer <token>"; at least
	// MinTokenLen characters, unique among Options.Tokens.
	Token string
	// Queues limits the token's claims (and push) to these queues. Default: every
	// queue. Renewing and finishing need only the job's lease token, which a claim
	// under this bearer token handed out.
	Queues []string
}

// Op names what a request asks, for Options.Authorize.
type Op string

// The operations.
const (
	OpClaim     Op = "claim"
	OpHeartbeat Op = "heartbeat"
	OpComplete  Op = "complete"
	OpFail      Op = "fail"
	OpSnooze    Op = "snooze"
	OpCancel    Op = "cancel"
)

// Request is what Options.Authorize is asked about: the operation, and the queue for
// OpClaim ("" otherwise: the other operations are fenced by the job's lease token).
type Request struct {
	Op    Op
	Queue string
	// JobID is the job of a single-job operation ("" for claims, many-job heartbeats
	// and many-job completions).
	JobID string
}

// ErrUnauthenticated, returned (or wrapped) by Options.Authorize, answers 401; any
// other error answers 403.
var ErrUnauthenticated = errors.New("gateway: not authenticated")

// Options configure a Gateway. One of Tokens, Authorize or Unauthenticated must be
// given.
type Options struct {
	// Tokens are the workers' bearer tokens. With Authorize also set, a request with
	// a known token is allowed (within the token's queues) and Authorize decides the rest.
	Tokens []Token
	// Authorize decides each request: it returns the worker's name, or an error
	// (ErrUnauthenticated: 401; any other: 403, its text not shown).
	Authorize func(r *http.Request, req Request) (worker string, err error)
	// Unauthenticated serves every request: the application authenticates in front
	// of the handler. Default false.
	Unauthenticated bool

	// MaxBodyBytes bounds a request body: 413 beyond it. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxClaim bounds a claim request's limit. Default DefaultMaxClaim.
	MaxClaim int
	// MaxWait bounds a claim request's wait_ms. Default DefaultMaxWait, at most MaxMaxWait.
	MaxWait time.Duration
	// MaxClaimBatch bounds one claim statement, shared by the requests that wait on a
	// queue. Default DefaultMaxClaimBatch.
	MaxClaimBatch int
	// PollInterval is the safety-net claim of a queue that requests wait on, for
	// jobs whose NOTIFY was lost or that became due by their run_at. Default
	// DefaultPollInterval; jittered by ±10%.
	PollInterval time.Duration
	// PollOnly does without the LISTEN connection (behind PgBouncer in transaction
	// mode): waiting requests then find new jobs at the next poll.
	PollOnly bool
	// ListenURL is where the gateway's one LISTEN connection goes when it must not go
	// where the client's pool does: with the pool behind PgBouncer in transaction
	// pooling, a connection string to PostgreSQL itself (for an HA pair, every node
	// with target_session_attrs=read-write) keeps NOTIFY's wake-ups instead of
	// PollOnly's polling, as skiplock.Config.ListenURL does for a client. Not with
	// PollOnly. Default: the pool's configuration.
	ListenURL string

	// Push registers push targets (push mode): the gateway claims the jobs of each
	// target's queue and POSTs them to its URL.
	Push []PushTarget
	// PushClient sends the push requests. Default: an http.Client without a
	// timeout of its own (each request is bounded by its target's Timeout).
	PushClient *http.Client
	// PublicURL is the gateway's base URL as push receivers reach it, sent in each
	// PushRequest as callback_url. Default "": not sent.
	PublicURL string

	// Logger receives server errors and push failures. Default slog.Default().
	Logger *slog.Logger
}

// Gateway is the HTTP worker gateway: an http.Handler. Make it with New, Start it
// before serving, Stop it when done.
type Gateway struct {
	client *skiplock.Client
	m      *skiplock.Manual
	opts   Options
	log    *slog.Logger
	tokens map[[32]byte]*Token
	mux    *http.ServeMux
	lease  time.Duration

	stats struct {
		claims, claimed, givenBack, finishes, finished, lost atomic.Int64
	}

	mu      sync.Mutex
	running *run
	queues  map[string]*queue // queues with waiting claims, by name

	// listenConn is Options.ListenURL's configuration, or nil (the pool's).
	listenConn *pgx.ConnConfig
}

// run is one Start's lifetime.
type run struct {
	ctx      context.Context // ends at Stop
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	finishes chan *finishReq
	// finishersDone is closed once every finisher has returned.
	finishersDone chan struct{}
	listener      *notify.Listener
	starts        starts // starter.go
}

// New checks opts and returns a gateway for client's schema. The client needs no
// Start of its own (its workers, if any, are not involved); its Config.LeaseDuration
// is the workers' lease, its Config.ID the worker id the jobs are claimed under.
func New(client *skiplock.Client, opts Options) (*Gateway, error) {
	if client == nil {
		return nil, &skiplock.ValidationError{Field: "client", Reason: "must not be nil"}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxClaim == 0 {
		opts.MaxClaim = DefaultMaxClaim
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.MaxClaimBatch == 0 {
		opts.MaxClaimBatch = DefaultMaxClaimBatch
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	bad := func(field, format string, args ...any) error {
		return &skiplock.ValidationError{Field: "gateway.Options." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(opts.Tokens) == 0 && opts.Authorize == nil && !opts.Unauthenticated:
		return nil, bad("Tokens", "no authentication: give Tokens or Authorize, or set Unauthenticated when the application authenticates in front of the gateway")
	case opts.Unauthenticated && (len(opts.Tokens) > 0 || opts.Authorize != nil):
		return nil, bad("Unauthenticated", "set together with Tokens or Authorize: choose one")
	case opts.MaxBodyBytes < 1<<10:
		return nil, bad("MaxBodyBytes", "%d is below 1 KiB", opts.MaxBodyBytes)
	case opts.MaxClaim < 1:
		return nil, bad("MaxClaim", "%d is below 1", opts.MaxClaim)
	case opts.MaxWait < 0 || opts.MaxWait > MaxMaxWait:
		return nil, bad("MaxWait", "%s is outside 0 to %s", opts.MaxWait, MaxMaxWait)
	case opts.MaxClaimBatch < opts.MaxClaim:
		return nil, bad("MaxClaimBatch", "%d is below MaxClaim (%d)", opts.MaxClaimBatch, opts.MaxClaim)
	case opts.PollInterval < time.Millisecond:
		return nil, bad("PollInterval", "%s is below 1ms", opts.PollInterval)
	case opts.ListenURL != "" && opts.PollOnly:
		return nil, bad("ListenURL", "is set with PollOnly, which opens no LISTEN connection: set one or the other")
	}
	g := &Gateway{client: client, m: client.Manual(), log: opts.Logger,
		tokens: map[[32]byte]*Token{}, queues: map[string]*queue{}}
	if opts.ListenURL != "" {
		c, err := pgx.ParseConfig(opts.ListenURL)
		if err != nil {
			return nil, bad("ListenURL", "%v", err) // pgx leaves the password out
		}
		g.listenConn = c
	}
	g.lease = g.m.LeaseDuration()
	opts.Tokens = slices.Clone(opts.Tokens)
	for i := range opts.Tokens {
		t := &opts.Tokens[i]
		switch {
		case strings.TrimSpace(t.Worker) == "":
			return nil, bad(fmt.Sprintf("Tokens[%d].Worker", i), "empty: name the worker")
		case len(t.Token) < MinTokenLen:
			return nil, bad(fmt.Sprintf("Tokens[%d].Token", i), "%d characters: use at least %d (random)", len(t.Token), MinTokenLen)
		}
		for _, q := range t.Queues {
			if q == "" {
				return nil, bad(fmt.Sprintf("Tokens[%d].Queues", i), "an empty queue name")
			}
		}
		t.Queues = slices.Clone(t.Queues)
		h := sha256.Sum256([]byte(t.Token))
		if _, dup := g.tokens[h]; dup {
			return nil, bad(fmt.Sprintf("Tokens[%d].Token", i), "the same token as another worker's")
		}
		g.tokens[h] = t
	}
	opts.Push = append([]PushTarget(nil), opts.Push...)
	pushed := map[string]bool{}
	for i := range opts.Push {
		if err := opts.Push[i].check(i); err != nil {
			return nil, err
		}
		if pushed[opts.Push[i].Queue] {
			return nil, bad(fmt.Sprintf("Push[%d].Queue", i), "queue %q is pushed to another target already", opts.Push[i].Queue)
		}
		pushed[opts.Push[i].Queue] = true
	}
	if opts.PushClient == nil {
		opts.PushClient = &http.Client{}
	}
	g.opts = opts
	g.mux = g.routes()
	return g, nil
}

// Start opens the LISTEN connection (unless PollOnly) and starts the finishers and
// the push targets' deliveries. Requests served before Start, or after Stop, answer
// 503 unavailable. Ending ctx stops the gateway as Stop does.
func (g *Gateway) Start(ctx context.Context) error {
	if g == nil || g.mux == nil {
		return errNotMade
	}
	if ctx == nil {
		return &skiplock.ValidationError{Field: "ctx", Reason: "must not be nil"}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running != nil {
		return errors.New("gateway: already started")
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &run{ctx: rctx, cancel: cancel, finishes: make(chan *finishReq, 4*g.opts.MaxClaimBatch), finishersDone: make(chan struct{}),
		starts: starts{signal: make(chan struct{}, 1)}}
	if !g.opts.PollOnly {
		conn := g.listenConn
		if conn == nil {
			conn = g.client.Pool().Config().ConnConfig
		}
		l, err := notify.New(notify.Config{
			ConnConfig: conn.Copy(),
			Channels:   []string{skiplock.Channel(g.client.Schema())},
			OnNotify:   g.heard,
			OnConnect:  g.wakeAll, // notifications sent while disconnected are lost: claim now
			Logger:     g.log,
		})
		if err != nil {
			cancel()
			return fmt.Errorf("gateway: starting the listener: %w", err)
		}
		r.listener = l
		r.wg.Go(func() { _ = l.Run(rctx) })
	}
	var fin sync.WaitGroup
	for range finishers {
		fin.Go(func() { g.finisher(r) })
	}
	r.wg.Go(func() { fin.Wait(); close(r.finishersDone) })
	r.wg.Go(func() { g.starter(r) })
	for i := range g.opts.Push {
		r.wg.Go(func() { g.pushLoop(r, &g.opts.Push[i]) })
	}
	g.running = r
	go func() {
		select {
		case <-ctx.Done():
			_ = g.Stop(context.Background())
		case <-rctx.Done():
		}
	}()
	return nil
}

// Stop stops the gateway: waiting claims answer 503 unavailable (retry), the push
// deliveries in flight are abandoned (their jobs' leases expire and the
// reclaimer retries them) and the LISTEN connection closes. It waits for all of it
// until ctx ends. Stop on a gateway that is not started returns nil.
func (g *Gateway) Stop(ctx context.Context) error {
	if g == nil || g.mux == nil {
		return nil
	}
	if ctx == nil {
		return &skiplock.ValidationError{Field: "ctx", Reason: "must not be nil"}
	}
	g.mu.Lock()
	r := g.running
	g.running = nil
	// The waiting claims answer now (503: retry), the jobs claimed ahead go back; the
	// queues' dispatchers see the run is over and return, and a later Start begins
	// with no queue of this run.
	var back []*skiplock.Job
	for _, q := range g.queues {
		back = append(back, g.close(q, errStopped)...)
		q.wake()
	}
	g.mu.Unlock()
	if r == nil {
		return nil
	}
	g.giveBack(ctx, back)
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: stopping: %w", ctx.Err())
	}
}

// current returns the running gateway's run, or nil.
func (g *Gateway) current() *run {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

// ServeHTTP serves the routes of the package doc.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g == nil || g.mux == nil {
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the gateway was not made with gateway.New", "")
		return
	}
	g.mux.ServeHTTP(w, r)
}

// errNotMade is the error of a method called on a Gateway not made by New.
var errNotMade = &skiplock.ValidationError{Field: "gateway", Reason: "not made with gateway.New"}

// Stats are a gateway's counters since New.
type Stats struct {
	// ClaimStatements counts the claim statements run for the waiting requests (and
	// push targets); Claimed the jobs they claimed; GivenBack those returned to the
	// queue unworked (claimed ahead and not asked for in time, or for a request that
	// left), their attempt given back.
	ClaimStatements, Claimed, GivenBack int64
	// FinishStatements counts the statements that wrote finishing calls; Finished the
	// calls written, LeaseLost those refused as stale.
	FinishStatements, Finished, LeaseLost int64
	// Waiting is the number of claim requests waiting now.
	Waiting int
}

// Stats returns the gateway's counters.
func (g *Gateway) Stats() Stats {
	if g == nil {
		return Stats{}
	}
	s := Stats{ClaimStatements: g.stats.claims.Load(), Claimed: g.stats.claimed.Load(), GivenBack: g.stats.givenBack.Load(),
		FinishStatements: g.stats.finishes.Load(), Finished: g.stats.finished.Load(), LeaseLost: g.stats.lost.Load()}
	g.mu.Lock()
	for _, q := range g.queues {
		s.Waiting += len(q.waiters)
	}
	g.mu.Unlock()
	return s
}
