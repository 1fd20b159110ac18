/**
 * skiplock for Node.js: enqueue jobs and work them with the guarantees of skiplock's Go
 * workers (fenced leases, retries with backoff, exactly-once completion in your own
 * transaction), through the SQL functions skiplock installs in its schema
 * (docs/sql_enqueue.md, docs/sql_workers.md).
 */
export { DEFAULT_SCHEMA, enqueue, quoteIdent } from "./enqueue";
export type { EnqueueOptions, EnqueueResult, Queryable } from "./enqueue";
export { Cancel, Job, LeaseLost, Permanent, Retry, SQLSTATE_LEASE_LOST, Snooze, Worker, cleanText, defaultName } from "./worker";
export type { Handler, Logger, OutcomeStatus, WorkerOptions } from "./worker";
