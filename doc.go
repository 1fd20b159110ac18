// Package skiplock turns the PostgreSQL an application already runs into its job
// queue (and, with package outbox, its transactional outbox).
//
// # A first run
//
// A job's arguments are a type whose Kind names the job; a worker takes them decoded.
// The job is enqueued in the application's own transaction, so it exists if and only
// if that transaction commits; a started Client claims and works it, and Stop lets
// running jobs finish before handing the rest back to the queue:
//
//	type SendEmail struct {
//		OrderID int    `json:"order_id"`
//		To      string `json:"to"`
//	}
//
//	func (SendEmail) Kind() string { return "send_email" }
//
//	workers := skiplock.NewWorkers()
//	err := skiplock.AddWorker(workers, skiplock.WorkFunc[SendEmail](
//		func(ctx context.Context, job *skiplock.Job, a SendEmail) error {
//			return mailer.Send(ctx, a.To, job.IdempotencyKey()) // an error retries with backoff
//		}), nil)
//	client, err := skiplock.NewClient(pool, skiplock.Config{ // pool: a *pgxpool.Pool, migrated by skiplock.Migrate
//		Queues:  map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 50}},
//		Workers: workers,
//	})
//	err = client.Start(ctx) // fails at once on a missing or outdated schema
//
//	tx, err := pool.Begin(ctx)
//	// … the business change in tx …
//	res, err := client.EnqueueTx(ctx, tx, SendEmail{OrderID: 42, To: "ana@example.com"},
//		&skiplock.EnqueueOpts{DeduplicationKey: "order-42"})
//	err = tx.Commit(ctx) // the job exists from here on; res.Duplicate reports a repeated key
//
//	err = client.Stop(ctx) // on shutdown: drain, then hand unstarted jobs back
//
// The package's Example runs this flow against a database.
//
// # Model
//
// A job is a row of the jobs table. It is written by EnqueueTx in the caller's own
// transaction, so it exists if and only if that transaction commits; a
// (kind, deduplication key) pair is unique, and a second enqueue with the same pair
// inserts nothing and returns the id of the job that holds it.
//
// A started Client claims due jobs with one statement per queue
// (SELECT … ORDER BY priority DESC, run_at, id LIMIT n FOR UPDATE SKIP LOCKED inside
// an UPDATE … RETURNING), which sets status 'running', counts the attempt and hands
// out a fresh lease token. The handler then runs outside any transaction, under a
// lease (lease_until) that a heartbeater renews for all of the process's jobs in one
// statement, never changing the token. Every write that finishes a job — succeed,
// retry, fail, snooze, cancel — is conditional on id, status 'running' and the lease
// token; when it changes nothing the caller gets ErrLeaseLost and writes nothing
// more. A worker that stalled past its lease (a "zombie") therefore cannot overwrite
// the state written by the worker that took the job over.
//
// Leases that expire — a crashed or partitioned worker — are returned to the queue by
// the reclaimer with the same backoff as a failed attempt, or failed once attempts
// are exhausted, so a job that crashes its worker never spins.
//
// States and transitions are described in docs/state_machine.md; the packages and
// what each owns in docs/architecture.md.
//
// # Guarantees
//
// Execution is at least once: a handler may run again after a crash or a lost lease.
// Committed state transitions are exactly once (fencing). Pass Job.IdempotencyKey (or
// IdempotencyKey(ctx)) to external systems so a retried handler does not repeat an
// effect. See docs/guarantees.md.
//
// # Time
//
// Every time-dependent statement takes its time as a parameter: the database's now()
// by default (Config.Clock nil), so hosts with skewed clocks agree; an injected Clock
// (skiplocktest.FakeClock) drives lease expiry, retries and retention in tests.
//
// # Connections
//
// A started client holds one dedicated LISTEN connection (none with PollOnly; to
// Config.ListenURL when set, for a pool behind a transaction-pooling PgBouncer) and
// otherwise borrows pool connections only for single statements: at most one claim
// per queue, the heartbeater, the completer, and one per maintenance service while
// that service runs — a handful, independent of MaxWorkers. Each maintenance service
// (reclaimer, retention, partitions, scheduler, rate-window sweeper, horizon watch) runs
// under its own advisory lock: however many clients are started, a service runs in
// one of them at a time, while different services may run at once.
//
// # Packages
//
//   - outbox: the transactional outbox (Outbox.Write in the caller's transaction),
//     the Relay that publishes events, Inbox for idempotent consumers, Admin.
//   - outbox/webhookpub, outbox/amqppub, outbox/kafkapub, outbox/natspub: one
//     publisher each for signed webhooks, RabbitMQ, Kafka and NATS JetStream;
//     outbox/outboxtest holds their conformance suite and an in-memory publisher.
//   - skiplocktest: helpers for the application's own tests: a throwaway PostgreSQL,
//     a migrated schema per test, RequireEnqueued, Work, Drain, FakeClock.
//   - metrics (Prometheus), metrics/otelmetrics (OpenTelemetry metrics) and health
//     (/healthz and /readyz).
//   - tracing: one OpenTelemetry trace from the enqueue through every attempt to the
//     broker.
//   - dashboard: the web dashboard, an http.Handler.
//   - gateway: the HTTP worker gateway, an http.Handler: workers in any language
//     claim (long poll), renew and finish jobs as JSON, fenced by lease tokens;
//     push mode for serverless workers.
//   - cmd/skiplock: the command-line tool (migrations, relay, jobs, schedules, limits,
//     the dashboard, the worker gateway, the benchmarks).
//
// # The Client's methods
//
// Every exported method of Client, by purpose (a test keeps this list complete):
//
//   - Enqueueing: [Client.Enqueue], [Client.EnqueueTx], [Client.EnqueueMany],
//     [Client.EnqueueManyTx], [Client.EnqueueRaw], [Client.EnqueueRawTx].
//   - Working and its lifecycle: [Client.Start], [Client.Stop],
//     [Client.StopAndCancel], [Client.Close], [Client.CheckSchema], [Client.CheckWritable],
//     [Client.CompleteTx], [Client.Manual].
//   - Jobs: [Client.JobGet], [Client.JobList], [Client.JobPage], [Client.JobCount],
//     [Client.JobStateEstimates], [Client.JobsByTx], [Client.JobsByTxPage], [Client.JobRetry],
//     [Client.JobCancel], [Client.JobDelete], [Client.JobRunNow].
//   - Queues: [Client.QueueList], [Client.QueueGet], [Client.QueuePause], [Client.QueuePauseAhead],
//     [Client.QueueResume].
//   - Limits: [Client.LimitSet], [Client.LimitDelete], [Client.LimitList],
//     [Client.LimitUsages].
//   - Fair queues (docs/fairness.md): [Client.QueueSetFair], [Client.QueueUnsetFair],
//     [Client.FairWeightSet], [Client.FairWeights], [Client.FairKeys].
//   - Schedules: [Client.ScheduleAdd], [Client.ScheduleUpdate], [Client.ScheduleGet],
//     [Client.ScheduleList], [Client.SchedulePause], [Client.ScheduleResume],
//     [Client.ScheduleTrigger], [Client.ScheduleDelete].
//   - Flows: [Client.EnqueueFlow], [Client.EnqueueFlowTx], [Client.FlowTree],
//     [Client.Children].
//   - Batches: [Client.BatchOpen], [Client.BatchOpenTx], [Client.BatchAdd],
//     [Client.BatchAddTx], [Client.BatchSeal], [Client.BatchSealTx], [Client.BatchGet],
//     [Client.BatchList], [Client.BatchMembers].
//   - Statistics and observation: [Client.Stats], [Client.Depth], [Client.Throughput],
//     [Client.Counters], [Client.Operations], [Client.Subscribe].
//   - Storage: [Client.RunRetention], [Client.Partitions].
//   - The client itself: [Client.ID], [Client.Schema], [Client.Pool], [Client.Clock],
//     [Client.ConfiguredQueues],
//     [Client.MaxPayloadBytes].
package skiplock
