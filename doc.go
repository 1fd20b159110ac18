// Package skiplock turns the PostgreSQL an application already runs into its job
// queue (and, with package outbox, its transactional outbox).
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
// States and transitions are described in docs/state_machine.md.
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
// A started client holds one dedicated LISTEN connection (none with PollOnly) and
// otherwise borrows pool connections only for single statements: at most one claim
// per queue, the heartbeater, the completer and one maintenance service at a time —
// a handful, independent of MaxWorkers.
package skiplock
