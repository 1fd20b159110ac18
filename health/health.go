// Package health serves a client's liveness and readiness over HTTP:
//
//	GET /healthz  200 when the database answers, 503 otherwise
//	GET /readyz   200 when the database takes writes (a commit returns: not a
//	              standby, not a primary whose failover manager holds its commits),
//	              every queue's oldest due pending job is younger than
//	              Options.MaxOldestDue (and, if set, the outbox lag is below
//	              Options.MaxOutboxLag), and none of this process's claims,
//	              heartbeats, completions or maintenance runs (nor those of the
//	              Options.Components, such as an outbox relay's claims, publishes
//	              and marks) has kept failing for Options.MaxFailing; 503
//	              otherwise, with the reasons
//
// Both answer JSON. /readyz reads only the partial indexes of live jobs and the
// outbox's unpublished index (no finished-job counts), so probing it often is cheap.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
)

// Options configure the handler.
type Options struct {
	// MaxOldestDue is the age of a queue's oldest due pending job from which /readyz
	// fails: the queue is not keeping up, or nothing works it. Default 5m.
	MaxOldestDue time.Duration
	// MaxOutboxLag, when positive, also fails /readyz when the oldest unpublished
	// outbox event is older. Default 0: not checked.
	MaxOutboxLag time.Duration
	// MaxFailing is how long one of this process's repeating operations (claim,
	// heartbeat, completion, a maintenance service; see skiplock.Client.Operations)
	// may keep failing before /readyz fails with an "operation_failing" reason.
	// Default 30s.
	MaxFailing time.Duration
	// Components are more parts of this process whose repeating operations /readyz
	// checks beside the client's, with the same MaxFailing: an *outbox.Relay, say
	// (its operations are "relay:claim", "relay:publish" and "relay:mark"). Nil
	// entries are skipped. Default: none.
	Components []Component
	// Queues limits the check to these queues. Default: every queue with jobs.
	Queues []string
	// SkipQueues leaves the queues out of /readyz: it then checks that the database
	// answers (and the outbox lag, when MaxOutboxLag is set) and this process's
	// operations. For processes that serve rather than work the queues — a relay, a
	// dashboard — whose Kubernetes readiness must not follow a queue's backlog.
	SkipQueues bool
	// Timeout bounds each probe's database work. Default 3s.
	Timeout time.Duration
	// SkipWritable leaves out /readyz's write check (skiplock.Client.CheckWritable,
	// a transaction that takes an id and commits): for a process that only reads,
	// such as a dashboard pointed at a replica. Default false: /readyz fails with a
	// "writable" reason while the database takes no writes — during a failover,
	// until the new primary's commits return.
	SkipWritable bool
}

// Component is anything that reports its repeating operations as
// skiplock.Client.Operations does; *outbox.Relay is one.
type Component interface {
	Operations() []skiplock.OperationStatus
}

// Reason is one failed readiness check.
type Reason struct {
	// Queue is the queue that failed (empty for the outbox).
	Queue string `json:"queue,omitempty"`
	// Check is "writable", "oldest_due_age", "outbox_lag" or "operation_failing".
	Check string `json:"check"`
	// Operation is the failing operation (check "operation_failing").
	Operation string `json:"operation,omitempty"`
	// ValueSeconds is the measured age, ThresholdSeconds the limit it exceeded.
	ValueSeconds     float64 `json:"value_seconds"`
	ThresholdSeconds float64 `json:"threshold_seconds"`
	// Message says the same for a human.
	Message string `json:"message"`
}

// Report is the JSON body of both endpoints.
type Report struct {
	// Status is "ok", "not_ready" or "unavailable".
	Status string `json:"status"`
	// Error is why the database could not be read (status "unavailable").
	Error string `json:"error,omitempty"`
	// Reasons are the failed readiness checks (status "not_ready").
	Reasons []Reason `json:"reasons,omitempty"`
}

// Handler returns an http.Handler serving /healthz and /readyz for c.
func Handler(c *skiplock.Client, opts Options) http.Handler {
	if opts.MaxOldestDue <= 0 {
		opts.MaxOldestDue = 5 * time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), opts.Timeout)
		defer cancel()
		if err := c.Pool().Ping(ctx); err != nil {
			write(w, http.StatusServiceUnavailable, Report{Status: "unavailable", Error: "database: " + err.Error()})
			return
		}
		write(w, http.StatusOK, Report{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), opts.Timeout)
		defer cancel()
		rep, code := Check(ctx, c, opts)
		write(w, code, rep)
	})
	return mux
}

// Check runs the readiness checks and returns the report and its HTTP status.
func Check(ctx context.Context, c *skiplock.Client, opts Options) (Report, int) {
	if opts.MaxOldestDue <= 0 {
		opts.MaxOldestDue = 5 * time.Minute
	}
	if opts.MaxFailing <= 0 {
		opts.MaxFailing = 30 * time.Second
	}
	s := &skiplock.Stats{}
	if opts.SkipQueues && opts.MaxOutboxLag <= 0 {
		if err := c.Pool().Ping(ctx); err != nil {
			return Report{Status: "unavailable", Error: "database: " + err.Error()}, http.StatusServiceUnavailable
		}
	} else {
		var err error
		s, err = c.Stats(ctx, &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
		if err != nil {
			return Report{Status: "unavailable", Error: err.Error()}, http.StatusServiceUnavailable
		}
	}
	var reasons []Reason
	if !opts.SkipWritable {
		if err := c.CheckWritable(ctx); err != nil {
			msg := err.Error()
			if ctx.Err() != nil {
				msg = "a commit did not return in time: no writable primary (a failover in progress, or the synchronous standbys do not acknowledge): " + msg
			}
			reasons = append(reasons, Reason{Check: "writable", Message: msg})
		}
	}
	check := func(q skiplock.QueueStats) {
		if q.OldestDueAge > opts.MaxOldestDue {
			reasons = append(reasons, Reason{Queue: q.Queue, Check: "oldest_due_age", ValueSeconds: q.OldestDueAge.Seconds(),
				ThresholdSeconds: opts.MaxOldestDue.Seconds(),
				Message: fmt.Sprintf("queue %q: the oldest due job has waited %s (threshold %s); %d due, %d running, %d expired leases",
					q.Queue, q.OldestDueAge.Round(time.Second), opts.MaxOldestDue, q.Due, q.Running, q.ExpiredLeases)})
		}
	}
	switch {
	case opts.SkipQueues:
	case len(opts.Queues) > 0:
		for _, name := range opts.Queues {
			check(s.Queue(name))
		}
	default:
		for _, q := range s.Queues {
			check(q)
		}
	}
	if opts.MaxOutboxLag > 0 && s.Outbox.OldestUnpublishedAge > opts.MaxOutboxLag {
		reasons = append(reasons, Reason{Check: "outbox_lag", ValueSeconds: s.Outbox.OldestUnpublishedAge.Seconds(),
			ThresholdSeconds: opts.MaxOutboxLag.Seconds(),
			Message: fmt.Sprintf("outbox: the oldest unpublished event was written %s ago (threshold %s); %d unpublished",
				s.Outbox.OldestUnpublishedAge.Round(time.Second), opts.MaxOutboxLag, s.Outbox.Unpublished)})
	}
	ops := c.Operations()
	for _, comp := range opts.Components {
		if comp != nil {
			ops = append(ops, comp.Operations()...)
		}
	}
	for _, op := range ops {
		if op.Failing && !op.FailingSince.IsZero() {
			since := hostclock.Since(op.FailingSince)
			if since < opts.MaxFailing {
				continue
			}
			reasons = append(reasons, Reason{Check: "operation_failing", Operation: op.Operation, ValueSeconds: since.Seconds(),
				ThresholdSeconds: opts.MaxFailing.Seconds(),
				Message: fmt.Sprintf("this process's %s has failed for %s (%d failures in all): %s",
					op.Operation, since.Round(time.Second), op.Failures, op.LastError)})
		}
	}
	if len(reasons) > 0 {
		return Report{Status: "not_ready", Reasons: reasons}, http.StatusServiceUnavailable
	}
	return Report{Status: "ok"}, http.StatusOK
}

func write(w http.ResponseWriter, code int, rep Report) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(rep)
}
