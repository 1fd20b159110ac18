package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/ident"
)

// jobKind is the kind of every job the harness enqueues.
const jobKind = "chaos"

// manualQueue is worked only by the zombie's low-level loop, so that loop always
// has jobs to hold when the zombie scenario freezes it.
const manualQueue = "manual"

// jobPayload tells the handler how to behave.
type jobPayload struct {
	Ms        int  `json:"ms"`                   // simulated work
	Stubborn  bool `json:"stubborn,omitempty"`   // ignores its context, like a handler stuck in a library call
	FailFirst bool `json:"fail_first,omitempty"` // the first attempt returns an error (retry path)
}

// workerSpec configures a worker (child process or in-process client).
type workerSpec struct {
	MaxWorkers int           `json:"max_workers"`
	Lease      time.Duration `json:"lease"`
	Heartbeat  time.Duration `json:"heartbeat"`
	Poll       time.Duration `json:"poll"`
	Reclaim    time.Duration `json:"reclaim"`
	// Manual also runs a loop on the low-level API (Claim, work, Complete) with no
	// heartbeat, announcing each claim on stdout: the zombie scenario stops the
	// process right there, so its Complete arrives after the lease was reclaimed.
	Manual bool `json:"manual,omitempty"`
	// Queues are further queues the worker serves, with their MaxWorkers (the
	// flow-control scenarios' limited queues).
	Queues map[string]int `json:"queues,omitempty"`
	// Periodic declares the schedule tickSchedule (a job of tickKind every second)
	// and works its jobs: the failover scenarios check that each fire time fires once.
	Periodic bool `json:"periodic,omitempty"`
	// ListenURL: the LISTEN connection's own (Config.ListenURL), behind PgBouncer.
	ListenURL string `json:"listen_url,omitempty"`
	// Citus: the schema has the distributed layout, where the scheduler does not run
	// (Start refuses it: docs/citus.md).
	Citus bool `json:"citus,omitempty"`
}

// The failover scenarios' periodic job: every second, on every worker's schedule list.
const (
	tickSchedule = "chaos-tick"
	tickKind     = "chaos_tick"
)

// auditTable returns the quoted audit table of schema.
func auditTable(schema string) string { return ident.Quote(schema) + ".chaos_audit" }

// worker is a skiplock client whose handlers and outcome events write the audit.
type worker struct {
	id     string
	schema string
	pool   *pgxpool.Pool
	client *skiplock.Client
	log    *slog.Logger

	events <-chan *skiplock.Event
	unsub  func()
	done   chan struct{}
}

// newWorker builds (does not start) a worker on pool. clock nil means the database's now().
func newWorker(pool *pgxpool.Pool, schema, id string, spec workerSpec, clock skiplock.Clock, log *slog.Logger) (*worker, error) {
	w := &worker{id: id, schema: schema, pool: pool, log: log, done: make(chan struct{})}
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler(jobKind, w.handle, &skiplock.WorkerOpts{MaxAttempts: 25}); err != nil {
		return nil, fmt.Errorf("registering the chaos handler: %w", err)
	}
	var periodic []skiplock.PeriodicJob
	if spec.Periodic {
		if err := ws.AddHandler(tickKind, func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
			return nil, fmt.Errorf("registering the tick handler: %w", err)
		}
		periodic = []skiplock.PeriodicJob{{Name: tickSchedule, Spec: "* * * * * *", Kind: tickKind}}
	}
	queues := map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: spec.MaxWorkers, MaxPrefetch: 4}}
	for q, n := range spec.Queues {
		queues[q] = skiplock.QueueConfig{MaxWorkers: n}
	}
	scheduler := time.Duration(0)
	if spec.Citus {
		scheduler = -1
	}
	c, err := skiplock.NewClient(pool, skiplock.Config{
		SchedulerInterval: scheduler,
		Schema:            schema, ID: id, Workers: ws, Clock: clock, Logger: log,
		Queues:            queues,
		LeaseDuration:     spec.Lease,
		HeartbeatInterval: spec.Heartbeat,
		PollInterval:      spec.Poll,
		ReclaimInterval:   spec.Reclaim,
		RetryPolicy:       skiplock.ExponentialBackoff{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		Retention:         skiplock.RetentionConfig{Interval: -1},
		Periodic:          periodic,
		ListenURL:         spec.ListenURL,
	})
	if err != nil {
		return nil, fmt.Errorf("creating worker %s: %w", id, err)
	}
	w.client = c
	w.events, w.unsub = c.Subscribe()
	return w, nil
}

// handle is the job handler: simulated work, then the job's "external effect", an
// audit row carrying the lease token the run held.
func (w *worker) handle(ctx context.Context, job *skiplock.Job) error {
	var p jobPayload
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		return skiplock.Permanent(fmt.Errorf("decoding chaos payload: %w", err))
	}
	work := time.Duration(p.Ms) * time.Millisecond
	if p.Stubborn {
		<-time.After(work) // deliberately deaf to ctx
	} else {
		t := time.NewTimer(work)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("chaos job interrupted: %w", context.Cause(ctx))
		}
	}
	if p.FailFirst && job.Attempt == 1 {
		return errors.New("chaos: the first attempt fails on purpose")
	}
	if err := w.audit(ctx, job.ID, job.LeaseToken, "effect"); err != nil {
		return fmt.Errorf("recording the job's effect: %w", err)
	}
	return nil
}

func (w *worker) audit(ctx context.Context, jobID, token, event string) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := w.pool.Exec(actx, "INSERT INTO "+auditTable(w.schema)+" (job_id, worker, lease_token, event) VALUES ($1, $2, $3, $4)",
		jobID, w.id, nullIfEmpty(token), event)
	return err
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// start starts the client and the goroutine that records outcome events as
// "ack_<kind>" audit rows (what the library told the worker about its write).
func (w *worker) start(ctx context.Context) error {
	go w.recordEvents()
	if err := w.client.Start(ctx); err != nil {
		w.unsub()
		return fmt.Errorf("starting worker %s: %w", w.id, err)
	}
	return nil
}

func (w *worker) recordEvents() {
	defer close(w.done)
	var ids, tokens, kinds []string
	flush := func() {
		if len(ids) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := w.pool.Exec(ctx, "INSERT INTO "+auditTable(w.schema)+
			" (job_id, worker, lease_token, event) SELECT id, $1, token, kind FROM unnest($2::uuid[], $3::uuid[], $4::text[]) AS a(id, token, kind)",
			w.id, ids, tokens, kinds)
		if err != nil {
			// Best effort: a missing ack row weakens no check, it only removes evidence.
			w.log.Debug("chaos worker: recording outcome events failed", "events", len(ids), "error", err)
		}
		ids, tokens, kinds = ids[:0], tokens[:0], kinds[:0]
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				flush()
				return
			}
			if ev.Job.LeaseToken == "" {
				continue
			}
			ids, tokens, kinds = append(ids, ev.Job.ID), append(tokens, ev.Job.LeaseToken), append(kinds, "ack_"+string(ev.Kind))
			if len(ids) >= 200 {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

// stop stops the client (cancelling handlers after grace) and flushes the events.
func (w *worker) stop(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := w.client.Stop(ctx); err != nil {
		w.log.Debug("chaos worker: stop timed out", "worker", w.id, "error", err)
	}
	w.unsub()
	<-w.done
	w.client.Close()
}

// manualLoop claims up to four jobs of manualQueue at a time with the low-level API, prints "holding" (the
// zombie scenario's cue to SIGSTOP this process), works without heartbeats, then
// completes each job and records what Complete said.
func (w *worker) manualLoop(ctx context.Context, poll time.Duration, announce func(string)) {
	for ctx.Err() == nil {
		jobs, err := w.client.Manual().Claim(ctx, manualQueue, 4)
		if err != nil || len(jobs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(poll):
			}
			continue
		}
		announce(fmt.Sprintf("holding %d", len(jobs)))
		<-time.After(300 * time.Millisecond) // the work; a SIGSTOP lands here
		for _, j := range jobs {
			if err := w.audit(ctx, j.ID, j.LeaseToken, "manual_effect"); err != nil {
				w.log.Debug("chaos worker: manual effect not recorded", "error", err)
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err := w.client.Manual().Complete(cctx, j)
			cancel()
			event := "manual_ok"
			switch {
			case errors.Is(err, skiplock.ErrLeaseLost):
				event = "manual_lease_lost"
			case err != nil:
				event = "manual_error"
			}
			if aerr := w.audit(ctx, j.ID, j.LeaseToken, event); aerr != nil {
				w.log.Debug("chaos worker: manual outcome not recorded", "error", aerr)
			}
		}
	}
}
