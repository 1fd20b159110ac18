// A fenced worker on skiplock's SQL worker protocol (docs/sql_workers.md).

import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { Client, DatabaseError, Pool } from "pg";
import type { ClientBase, PoolClient, PoolConfig } from "pg";

import { DEFAULT_SCHEMA, quoteIdent } from "./enqueue";
import type { Queryable } from "./enqueue";

/** SQLSTATE of complete_job(…, abort_if_lost => true) when the lease was lost. */
export const SQLSTATE_LEASE_LOST = "SK409";

/** Throw from a handler to run the job again after `delay` seconds, giving its attempt back. */
export class Snooze extends Error {
  constructor(readonly delay: number) {
    super(`snoozed for ${delay}s`);
    this.name = "Snooze";
  }
}

/** Throw from a handler to cancel the job: it will not run again. */
export class Cancel extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Cancel";
  }
}

/** Throw from a handler to fail the job now, whatever attempts remain. */
export class Permanent extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Permanent";
  }
}

/**
 * Throw from a handler to retry the job after `delay` seconds (undefined: the default
 * backoff). Any other error retries with the default backoff too; Retry sets the delay.
 */
export class Retry extends Error {
  constructor(message: string, readonly delay?: number) {
    super(message);
    this.name = "Retry";
  }
}

/** The job's lease was lost (reclaimed, cancelled, or finished elsewhere): nothing was written. */
export class LeaseLost extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LeaseLost";
  }
}

/** What recording an outcome answered: the job's new status, or lost (nothing written). */
export type OutcomeStatus = "succeeded" | "pending" | "failed" | "cancelled" | "lost";

/** A claimed job, as its handler receives it. */
export class Job {
  readonly id: string;
  readonly kind: string;
  readonly args: any;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly priority: number;
  readonly metadata: Record<string, unknown> | null;
  readonly tags: string[] | null;
  readonly createdAt: Date;
  readonly leaseToken: string;
  leaseUntil: Date;
  /** Aborted when a heartbeat finds the lease lost, or when the worker's shutdown timeout passes. */
  readonly signal: AbortSignal;

  /** @internal */ readonly _abort = new AbortController();
  /** @internal */ _client: PoolClient | null = null;
  /** @internal */ _inTx = false;
  /** @internal */ _completedInTx: "committed" | "pending" | "external" | null = null;
  /** @internal */ _finishing = false;
  /** @internal */ readonly _schema: string;

  /** @internal */
  constructor(row: ClaimRow, schema: string) {
    this.id = row.id;
    this.kind = row.kind;
    this.args = row.args;
    this.attempt = row.attempt;
    this.maxAttempts = row.max_attempts;
    this.priority = row.priority;
    this.metadata = row.metadata;
    this.tags = row.tags;
    this.createdAt = row.created_at;
    this.leaseToken = row.lease_token;
    this.leaseUntil = row.lease_until;
    this.signal = this._abort.signal;
    this._schema = schema;
  }

  /** True once a heartbeat found the lease lost: stop working, nothing will be kept. */
  get leaseLost(): boolean {
    return this.signal.aborted && this.signal.reason instanceof LeaseLost;
  }

  /**
   * The connection this job's handler runs on (autocommit), for its business writes.
   * Use job.transaction() to write and completeTx in one transaction.
   */
  get client(): PoolClient {
    if (this._client === null) {
      throw new Error("skiplock: job.client is only available while the job's handler runs");
    }
    return this._client;
  }

  /**
   * Runs fn inside a transaction on job.client: COMMIT when it resolves, ROLLBACK when
   * it throws (the error is rethrown). Call completeTx inside it for exactly-once effects.
   */
  async transaction<T>(fn: (client: PoolClient) => Promise<T>): Promise<T> {
    const c = this.client;
    if (this._inTx) {
      throw new Error("skiplock: job.transaction() does not nest");
    }
    await c.query("BEGIN");
    this._inTx = true;
    try {
      const result = await fn(c);
      await c.query("COMMIT");
      if (this._completedInTx === "pending") {
        this._completedInTx = "committed";
        this._finishing = true; // done: a heartbeat now finds the lease ended, not lost
      }
      return result;
    } catch (e) {
      await c.query("ROLLBACK").catch(() => undefined);
      if (this._completedInTx === "pending") {
        this._completedInTx = null;
      }
      throw e;
    } finally {
      this._inTx = false;
    }
  }

  /**
   * Marks the job succeeded inside an open transaction (Go's CompleteTx): job.client's
   * inside job.transaction(), or `client`, a connection of the caller's in a transaction
   * it commits itself. The business writes of that transaction and the completion commit
   * together or not at all. If the lease was lost, rejects with LeaseLost and leaves the
   * transaction aborted, so nothing written in it can commit.
   */
  async completeTx(output?: unknown, client?: ClientBase): Promise<void> {
    let c: ClientBase;
    if (client !== undefined) {
      c = client;
    } else {
      c = this.client;
      if (!this._inTx) {
        throw new Error("skiplock: completeTx without a client must run inside job.transaction()");
      }
    }
    try {
      await c.query(`SELECT ${quoteIdent(this._schema)}.complete_job($1, $2, $3::jsonb, abort_if_lost => true)`, [
        this.id,
        this.leaseToken,
        output === undefined || output === null ? null : JSON.stringify(output),
      ]);
    } catch (e) {
      if (e instanceof DatabaseError && e.code === SQLSTATE_LEASE_LOST) {
        throw new LeaseLost(`skiplock: lease lost for job ${this.id}; the transaction is aborted`);
      }
      throw e;
    }
    this._completedInTx = client !== undefined ? "external" : "pending";
  }
}

/** A handler: its return value (JSON) is the job's output; what it throws decides the outcome. */
export type Handler = (job: Job) => unknown | Promise<unknown>;

/** Where the worker logs: console by default; pass your own (pino, winston…) or a silent one. */
export interface Logger {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

/** Options of a Worker. Durations are in seconds, as in the Python client. */
export interface WorkerOptions {
  /** The queue to claim from. Default "default". */
  queue?: string;
  /** Handlers running at once, 1..1000. Default 1. */
  concurrency?: number;
  /**
   * The most jobs claimed ahead of free handlers, 0..1000, so that a handler that
   * finishes finds its next job waiting instead of waiting for a claim, and a claim
   * brings a batch. Adaptive, as Go's MaxPrefetch: about prefetchWindow of work (by the
   * handlers' average run time), at most this many. Their leases run from the claim; on
   * stop they go back to the queue, their attempt returned. Default 1000; 0 disables.
   */
  prefetch?: number;
  /** How much work (seconds of handler time) the prefetch may hold. Default 0.05. */
  prefetchWindow?: number;
  /** The worker's name (worker_id, attempt history). Default host-pid-random. */
  name?: string;
  /** Lease length in seconds, at least 1; heartbeats every lease/3. Default 30. */
  lease?: number;
  /** Seconds between claims when no NOTIFY arrives. Default 1. */
  pollInterval?: number;
  /** Seconds stop() waits for running handlers. Default 30. */
  shutdownTimeout?: number;
  /** Return jobs whose lease expired (a killed worker's) every lease seconds. Default true. */
  reclaim?: boolean;
  /** skiplock's schema. Default "skiplock". */
  schema?: string;
  /** Stop gracefully on SIGTERM and SIGINT while run() runs. Default true. */
  handleSignals?: boolean;
  /** Called after each outcome is recorded, with the job's new status or "lost". */
  onOutcome?: (job: Job, status: OutcomeStatus) => void;
  /** Default: console, debug messages dropped. */
  logger?: Logger;
  /** Extra pg pool settings (ssl, password…); max is set by the worker. */
  pool?: PoolConfig;
}

/** @internal */
export interface ClaimRow {
  id: string;
  kind: string;
  args: any;
  attempt: number;
  max_attempts: number;
  priority: number;
  metadata: Record<string, unknown> | null;
  tags: string[] | null;
  created_at: Date;
  lease_token: string;
  lease_until: Date;
}

const consoleLogger: Logger = {
  debug: () => undefined,
  info: (m) => console.info(m),
  warn: (m) => console.warn(m),
  error: (m) => console.error(m),
};

/** What PostgreSQL text can hold: NUL and lone surrogates become U+FFFD (Go's policy; the database cuts text over 16 KiB). */
export function cleanText(s: string): string {
  return s.replace(/\0/g, "\uFFFD").replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD");
}

function errorText(e: unknown): string {
  if (e instanceof Cancel || e instanceof Permanent || e instanceof Retry) {
    return cleanText(e.message);
  }
  if (e instanceof Error) {
    return cleanText(`${e.name}: ${e.message}`);
  }
  return cleanText(`thrown: ${String(e)}`);
}

function interval(seconds: number): string {
  return `${Math.max(0, seconds)} seconds`;
}

/** host-pid-random, as the Go client names itself. */
export function defaultName(): string {
  return `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
}

/** A connection-level failure (worth a reconnect and retry), not a refusal by the database. */
function transient(e: unknown): boolean {
  return !(e instanceof DatabaseError) || e.code === undefined || e.code.startsWith("08") || e.code === "57P01";
}

class OutputRefused extends Error {}

/** How many outcomes may wait to be recorded before the claimer pauses. */
const MAX_HELD = 2000;

/** One outcome, as finish_jobs takes it (docs/sql_workers.md). */
interface Outcome {
  action: "complete" | "retry" | "fail" | "snooze" | "cancel";
  delay?: string | null;
  error?: string | null;
  output?: string | null;
}

/**
 * Claims jobs of one queue through the SQL protocol and runs them, up to `concurrency`
 * at once, each on its own pooled connection. Heartbeats (every lease/3) and reclaims
 * (every lease, unless reclaim is false) run in the background; a LISTEN connection
 * wakes the claimer when a job is enqueued. run() resolves after stop(), SIGTERM or
 * SIGINT: the worker claims nothing more, waits up to shutdownTimeout for running
 * handlers (then aborts their job.signal and leaves them to their leases), and closes
 * its connections.
 */
export class Worker {
  readonly name: string;
  readonly queue: string;
  readonly concurrency: number;
  readonly prefetch: number;
  readonly prefetchWindow: number;
  readonly lease: number;
  readonly pollInterval: number;
  readonly shutdownTimeout: number;
  readonly reclaim: boolean;
  readonly schema: string;

  private readonly handlers: Map<string, Handler>;
  private readonly s: string;
  private readonly log: Logger;
  private readonly onOutcome?: (job: Job, status: OutcomeStatus) => void;
  private readonly handleSignals: boolean;
  private readonly poolConfig: PoolConfig;
  private pool: Pool | null = null;
  private listener: Client | null = null;
  private stopping = false;
  /** Every claimed job until its outcome is recorded (or given up on), by id: what heartbeats renew. */
  private running = new Map<string, Job>();
  /** Claimed jobs waiting for a free handler, in claim order. */
  private buffer: Job[] = [];
  /** Handlers running now. */
  private active = 0;
  /** Outcomes on their way to the database. */
  private held = 0;
  /** The claimer waits for places (not for a NOTIFY or the poll): a finished job wakes it. */
  private waitingForPlaces = false;
  /** Moving average of the handlers' run times in ms (0: none ran yet). */
  private avgRunMs = 0;
  private tasks = new Set<Promise<void>>();
  private wakeUp: (() => void) | null = null;
  private woken = false;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private beating = false;
  private lastReclaim = 0;
  private runPromise: Promise<void> | null = null;
  private outcomes: { job: Job; o: Outcome; resolve: (s: OutcomeStatus | undefined) => void }[] = [];
  private flushing = false;
  private abandoned = false;

  constructor(connectionString: string, handlers: Record<string, Handler>, opts: WorkerOptions = {}) {
    const entries = Object.entries(handlers ?? {});
    if (entries.length === 0) {
      throw new TypeError("skiplock: handlers must map at least one kind to a handler");
    }
    for (const [kind, h] of entries) {
      if (kind === "" || typeof h !== "function") {
        throw new TypeError(`skiplock: handler for kind ${JSON.stringify(kind)} must be a function`);
      }
    }
    const concurrency = opts.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1000) {
      throw new RangeError(`skiplock: concurrency ${concurrency} is outside 1..1000`);
    }
    const prefetch = opts.prefetch ?? 1000;
    const prefetchWindow = opts.prefetchWindow ?? 0.05;
    if (!(prefetchWindow >= 0)) {
      throw new RangeError(`skiplock: prefetchWindow ${prefetchWindow}s is negative`);
    }
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > 1000) {
      throw new RangeError(`skiplock: prefetch ${prefetch} is outside 0..1000`);
    }
    const lease = opts.lease ?? 30;
    if (!(lease >= 1)) {
      throw new RangeError(`skiplock: lease ${lease}s is below 1s`);
    }
    const pollInterval = opts.pollInterval ?? 1;
    const shutdownTimeout = opts.shutdownTimeout ?? 30;
    if (!(pollInterval > 0) || !(shutdownTimeout >= 0)) {
      throw new RangeError("skiplock: pollInterval must be positive and shutdownTimeout not negative");
    }
    this.handlers = new Map(entries);
    this.queue = opts.queue ?? "default";
    this.concurrency = concurrency;
    this.prefetch = prefetch;
    this.prefetchWindow = prefetchWindow;
    this.name = opts.name ?? defaultName();
    this.lease = lease;
    this.pollInterval = pollInterval;
    this.shutdownTimeout = shutdownTimeout;
    this.reclaim = opts.reclaim ?? true;
    this.schema = opts.schema ?? DEFAULT_SCHEMA;
    this.s = quoteIdent(this.schema);
    this.log = opts.logger ?? consoleLogger;
    this.onOutcome = opts.onOutcome;
    this.handleSignals = opts.handleSignals ?? true;
    this.poolConfig = {
      ...opts.pool,
      connectionString,
      // One connection per running handler, plus the claimer's, the completer's and the
      // heartbeater's.
      max: concurrency + 3,
      application_name: `skiplock node worker ${this.name}`.slice(0, 63),
    };
  }

  /** Asks run() to stop gracefully; safe to call any time, any number of times. */
  stop(): void {
    this.stopping = true;
    this.wake();
  }

  /** Works jobs until stop(), SIGTERM or SIGINT; resolves once stopped. */
  run(): Promise<void> {
    if (this.runPromise === null) {
      this.runPromise = this.runOnce();
    }
    return this.runPromise;
  }

  private async runOnce(): Promise<void> {
    const onSignal = (sig: NodeJS.Signals) => {
      this.log.info(`skiplock: ${sig} received: stopping`);
      this.stop();
    };
    if (this.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    const pool = new Pool(this.poolConfig);
    pool.on("error", (e) => this.log.warn(`skiplock: an idle connection failed: ${e.message}`));
    this.pool = pool;
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), (this.lease / 3) * 1000);
    void this.listen();
    this.log.info(`skiplock: worker ${this.name} working queue ${this.queue} (${this.concurrency} at once)`);
    try {
      await this.claimLoop();
    } finally {
      this.stopping = true;
      this.giveBack();
      await this.drain();
      clearInterval(this.heartbeatTimer);
      const l = this.listener;
      this.listener = null;
      await l?.end().catch(() => undefined);
      // pool.end() waits for every connection to be released: not for abandoned handlers.
      const ended = pool.end().catch(() => undefined);
      if (!this.abandoned) {
        await ended;
      }
      if (this.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      this.log.info(`skiplock: worker ${this.name} stopped`);
    }
  }

  private async drain(): Promise<void> {
    if (this.tasks.size === 0) {
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), this.shutdownTimeout * 1000);
    });
    const done = Promise.all([...this.tasks]).then(() => false);
    const late = await Promise.race([done, timedOut]);
    clearTimeout(timer);
    this.abandoned = late;
    if (late) {
      const still = [...this.running.values()].filter((j) => !j._finishing);
      this.log.warn(
        `skiplock: stopped with ${still.length} job(s) still running (${still.map((j) => j.id).join(", ")}); ` +
          "their leases will expire and they run again",
      );
      for (const j of still) {
        j._abort.abort(new Error("skiplock: the worker stopped"));
      }
    }
  }

  private wake(): void {
    this.woken = true;
    const w = this.wakeUp;
    this.wakeUp = null;
    w?.();
  }

  /** Resolves after seconds, or at once when woken (a NOTIFY, a finished job, stop()). */
  private sleep(seconds: number): Promise<void> {
    if (this.woken || this.stopping) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const t = setTimeout(() => {
        this.wakeUp = null;
        resolve();
      }, seconds * 1000);
      this.wakeUp = () => {
        clearTimeout(t);
        resolve();
      };
    }).then(() => {
      this.woken = false;
    });
  }

  private async claimLoop(): Promise<void> {
    const kinds = [...this.handlers.keys()].sort();
    // The claim commits asynchronously (set_config, as Go's claim does): a claim lost
    // in a crash leaves the job pending, and an outcome, which commits synchronously,
    // makes its claim durable too (docs/sql_workers.md).
    const sql =
      `SELECT c.id::text AS id, c.kind, c.args, c.attempt, c.max_attempts, c.priority, c.metadata, c.tags, c.created_at, ` +
      `c.lease_token::text AS lease_token, c.lease_until FROM (SELECT set_config('synchronous_commit', 'off', true)) AS s, ` +
      `${this.s}.claim_jobs($1, $2, n => $3, lease => $4::interval, kinds => $5) AS c`;
    let backoff = 0.1;
    while (!this.stopping) {
      // As Go's producer: while jobs wait in the buffer, a claim waits for a quarter of
      // the places to be free, so that each round trip brings a batch.
      const limit = this.limit();
      const free = limit - this.active - this.buffer.length;
      if (free <= 0 || (this.buffer.length > 0 && free < limit / 4) || this.held >= MAX_HELD) {
        this.waitingForPlaces = true;
        await this.sleep(this.pollInterval);
        this.waitingForPlaces = false;
        continue;
      }
      this.woken = false;
      let rows: ClaimRow[];
      try {
        const res = await this.pool!.query<ClaimRow>(sql, [this.queue, this.name, Math.min(free, 1000), interval(this.lease), kinds]);
        rows = res.rows;
        backoff = 0.1;
      } catch (e) {
        if (transient(e)) {
          this.log.warn(`skiplock: claiming from ${this.queue} failed (retrying): ${(e as Error).message}`);
        } else {
          this.log.error(`skiplock: claiming from ${this.queue} refused: ${(e as Error).message}`);
          backoff = Math.max(backoff, this.pollInterval);
        }
        await this.sleep(backoff);
        backoff = Math.min(backoff * 2, 30);
        continue;
      }
      for (const row of rows) {
        const job = new Job(row, this.schema);
        this.running.set(job.id, job);
        this.buffer.push(job);
      }
      this.startJobs();
      if (rows.length < Math.min(free, 1000)) {
        // The queue is drained for now: wait for a NOTIFY, a finished job or the poll.
        await this.sleep(this.pollInterval);
      }
    }
  }

  /** The most jobs to hold (running or buffered): the handlers and about prefetchWindow of work. */
  private limit(): number {
    if (this.prefetch === 0 || this.avgRunMs <= 0) {
      return this.concurrency;
    }
    return this.concurrency + Math.min(Math.floor((this.prefetchWindow * 1000) / this.avgRunMs), this.prefetch);
  }

  /**
   * Wakes the claimer if it waits for places. One waiting for jobs (its last claim
   * found fewer than it asked for) sleeps on: a claim per finished job would find
   * nothing, and delay the claim a NOTIFY calls for.
   */
  private placeFreed(): void {
    if (this.waitingForPlaces) {
      this.wake();
    }
  }

  /** Starts buffered jobs on the free handlers. */
  private startJobs(): void {
    while (this.active < this.concurrency && this.buffer.length > 0 && !this.stopping) {
      const job = this.buffer.shift()!;
      if (job.signal.aborted) {
        // Its lease was lost while it waited (a heartbeat said so): someone else owns it.
        this.running.delete(job.id);
        this.report(job, "lost");
        continue;
      }
      this.active++;
      const task = this.execute(job).finally(() => {
        this.tasks.delete(task);
      });
      this.tasks.add(task);
    }
  }

  /** Gives the buffered jobs back to the queue at once, their attempt returned (a stop). */
  private giveBack(): void {
    const jobs = this.buffer.splice(0);
    for (const job of jobs) {
      this.held++;
      const task = this.record(job, { action: "snooze", delay: interval(0) }).finally(() => {
        this.tasks.delete(task);
      });
      this.tasks.add(task);
    }
  }

  /** Wakes the claimer when a job is enqueued into the queue (NOTIFY at commit). */
  private async listen(): Promise<void> {
    const channel = `${this.schema}.jobs`.slice(0, 63);
    while (!this.stopping) {
      const c = new Client({ ...this.poolConfig });
      let failed: (e: Error) => void = () => undefined;
      const broken = new Promise<Error>((resolve) => {
        failed = resolve;
      });
      c.on("error", (e) => failed(e));
      c.on("end", () => failed(new Error("connection ended")));
      c.on("notification", (n) => {
        if (n.payload === this.queue) {
          this.wake();
        }
      });
      try {
        await c.connect();
        await c.query(`LISTEN ${quoteIdent(channel)}`);
        if (this.stopping) {
          await c.end();
          return;
        }
        this.listener = c;
        const e = await broken;
        if (this.stopping) {
          return;
        }
        this.log.debug(`skiplock: the LISTEN connection failed (polling meanwhile): ${e.message}`);
      } catch (e) {
        this.log.debug(`skiplock: the LISTEN connection failed (polling meanwhile): ${(e as Error).message}`);
      }
      this.listener = null;
      await c.end().catch(() => undefined);
      await new Promise((r) => setTimeout(r, this.pollInterval * 1000));
    }
  }

  private async heartbeat(): Promise<void> {
    if (this.beating || this.pool === null) {
      return;
    }
    this.beating = true;
    try {
      const held = [...this.running.values()].filter((j) => !j.signal.aborted);
      if (held.length > 0) {
        // One round trip for every held job, committed asynchronously as Go's heartbeat is.
        const res = await this.pool.query<{ id: string; r: string }>(
          `SELECT h.id::text AS id, ${this.s}.heartbeat_job(h.id, h.token, $3::interval) AS r ` +
            `FROM (SELECT set_config('synchronous_commit', 'off', true)) AS s, unnest($1::uuid[], $2::uuid[]) AS h(id, token)`,
          [held.map((j) => j.id), held.map((j) => j.leaseToken), interval(this.lease)],
        );
        const byId = new Map(held.map((j) => [j.id, j]));
        for (const { id, r } of res.rows) {
          const job = byId.get(id);
          // A job whose outcome is being recorded meanwhile is lost to its heartbeat, not to its handler.
          if (job !== undefined && r === "lost" && !job._finishing && this.running.has(job.id)) {
            job._abort.abort(new LeaseLost(`skiplock: lease lost for job ${job.id}`));
            this.log.warn(`skiplock: lease lost for job ${job.id} (${job.kind}): its outcome will not be kept`);
          }
        }
      }
      if (this.reclaim && Date.now() - this.lastReclaim >= this.lease * 1000) {
        this.lastReclaim = Date.now();
        const res = await this.pool.query<{ n: number }>(`SELECT ${this.s}.reclaim_jobs($1) AS n`, [this.queue]);
        const n = res.rows[0]?.n ?? 0;
        if (n > 0) {
          this.log.info(`skiplock: reclaimed ${n} job(s) of queue ${this.queue} whose lease had expired`);
        }
      }
    } catch (e) {
      this.log.warn(`skiplock: heartbeat failed (retrying): ${(e as Error).message}`);
    } finally {
      this.beating = false;
    }
  }

  /**
   * Runs job on a handler. The handler's place is free once it returns: its outcome is
   * recorded by the completer meanwhile (the job stays held, and heartbeated, until it
   * is), as Go's executor hands an outcome to its completer and takes the next job.
   */
  private async execute(job: Job): Promise<void> {
    let o: Outcome | null = null;
    try {
      let client: PoolClient;
      try {
        client = await this.pool!.connect();
      } catch (e) {
        this.log.error(`skiplock: job ${job.id}: no connection to run it on (its lease will expire and it runs again): ${(e as Error).message}`);
        this.running.delete(job.id);
        return;
      }
      let broken: Error | undefined;
      try {
        const t0 = performance.now();
        o = await this.runJob(client, job);
        const ms = Math.max(performance.now() - t0, 0.001);
        this.avgRunMs = this.avgRunMs === 0 ? ms : this.avgRunMs + (ms - this.avgRunMs) / 8;
        if (client.getTransactionStatus() !== "I") {
          this.log.warn("skiplock: a handler left a transaction open on job.client; rolling it back");
          await client.query("ROLLBACK");
        }
      } catch (e) {
        broken = e as Error;
        this.log.error(`skiplock: job ${job.id} (${job.kind}): ${broken.message}`);
      } finally {
        client.release(broken);
      }
    } finally {
      this.active--;
      if (o === null) {
        this.running.delete(job.id);
      } else {
        job._finishing = true;
        this.held++;
      }
      this.startJobs();
      this.placeFreed();
    }
    if (o !== null) {
      await this.record(job, o);
    }
  }

  /** Runs job's handler and says what to record (null: nothing, its status is reported). */
  private async runJob(client: PoolClient, job: Job): Promise<Outcome | null> {
    const handler = this.handlers.get(job.kind);
    job._client = client;
    let result: unknown;
    try {
      if (handler === undefined) {
        throw new Permanent(`no handler registered for kind ${JSON.stringify(job.kind)}`);
      }
      result = await handler(job);
    } catch (e) {
      job._client = null;
      if (e instanceof Snooze) {
        return { action: "snooze", delay: interval(e.delay) };
      }
      if (e instanceof Cancel) {
        return { action: "cancel", error: errorText(e) };
      }
      if (e instanceof Permanent) {
        return { action: "fail", error: errorText(e) };
      }
      if (e instanceof LeaseLost) {
        this.log.warn(`skiplock: job ${job.id} (${job.kind}): ${e.message}`);
        this.report(job, "lost");
        return null;
      }
      this.log.info(`skiplock: job ${job.id} (${job.kind}) attempt ${job.attempt} failed: ${errorText(e)}`);
      const delay = e instanceof Retry && e.delay !== undefined ? interval(e.delay) : null;
      return { action: "retry", error: errorText(e), delay };
    } finally {
      job._client = null;
    }
    job._finishing = true;
    if (job._completedInTx === "committed") {
      this.report(job, "succeeded");
      return null;
    }
    try {
      const output = result === undefined || result === null ? null : JSON.stringify(result);
      return { action: "complete", output };
    } catch (e) {
      return { action: "retry", error: cleanText(`the handler's output was refused: not JSON: ${(e as Error).message}`) };
    }
  }

  /** Records o (a complete whose output is refused becomes a retry), then lets the job go. */
  private async record(job: Job, o: Outcome): Promise<void> {
    try {
      try {
        await this.finish(job, o);
      } catch (e) {
        if (!(e instanceof OutputRefused)) {
          throw e;
        }
        await this.finish(job, { action: "retry", error: cleanText(`the handler's output was refused: ${e.message}`) });
      }
    } catch (e) {
      this.log.error(`skiplock: job ${job.id} (${job.kind}): recording its outcome failed; it will run again: ${(e as Error).message}`);
    } finally {
      this.running.delete(job.id);
      this.held--;
      this.placeFreed();
    }
  }

  private finishSQL(): string {
    return (
      `SELECT status FROM ${this.s}.finish_jobs($1::uuid[], $2::uuid[], $3::text[], $4::interval[], $5::text[], $6::jsonb[])`
    );
  }

  private static params(batch: { job: Job; o: Outcome }[]): unknown[] {
    return [
      batch.map((b) => b.job.id),
      batch.map((b) => b.job.leaseToken),
      batch.map((b) => b.o.action),
      batch.map((b) => b.o.delay ?? null),
      batch.map((b) => b.o.error ?? null),
      batch.map((b) => b.o.output ?? null),
    ];
  }

  /** Queues o for the next batch; resolves to its status, or undefined if the batch failed. */
  private finishBatched(job: Job, o: Outcome): Promise<OutcomeStatus | undefined> {
    return new Promise((resolve) => {
      this.outcomes.push({ job, o, resolve });
      if (!this.flushing) {
        void this.flush();
      }
    });
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.outcomes.length > 0) {
        const batch = this.outcomes.splice(0, 1000);
        try {
          const res = await this.pool!.query<{ status: OutcomeStatus }>(this.finishSQL(), Worker.params(batch));
          batch.forEach((b, i) => b.resolve(res.rows[i]?.status ?? "lost"));
        } catch (e) {
          if (batch.length > 1 || transient(e)) {
            this.log.debug(`skiplock: writing ${batch.length} outcome(s) at once failed (writing each alone): ${(e as Error).message}`);
          }
          for (const b of batch) {
            b.resolve(undefined);
          }
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  /** Writes o alone on the job's connection; undefined when it was refused or gave up. */
  private async finishAlone(job: Job, o: Outcome): Promise<OutcomeStatus | undefined> {
    const deadline = Date.now() + this.lease * 1000;
    let backoff = 100;
    const c: Queryable = this.pool!;
    for (;;) {
      try {
        const res = await c.query<{ status: OutcomeStatus }>(this.finishSQL(), Worker.params([{ job, o }]));
        return res.rows[0]?.status ?? "lost";
      } catch (e) {
        if (e instanceof DatabaseError && e.code === "22023") {
          if (o.action === "complete" && e.column === "output") {
            throw new OutputRefused(e.message);
          }
          this.log.error(`skiplock: job ${job.id}: its ${o.action} was refused: ${e.message}`);
          return undefined;
        }
        if (!transient(e) || Date.now() > deadline) {
          this.log.error(`skiplock: job ${job.id}: recording its outcome failed; it will run again: ${(e as Error).message}`);
          return undefined;
        }
        this.log.warn(`skiplock: job ${job.id}: recording its outcome failed (retrying): ${(e as Error).message}`);
        await new Promise((r) => setTimeout(r, backoff)); // a pause before retrying
        backoff = Math.min(backoff * 2, 2000);
      }
    }
  }

  private report(job: Job, status: OutcomeStatus): void {
    try {
      this.onOutcome?.(job, status);
    } catch (e) {
      this.log.error(`skiplock: onOutcome threw: ${(e as Error).message}`);
    }
  }

  /**
   * Records one outcome, fenced by the job's token. Outcomes of jobs that finish
   * together are written together, in one finish_jobs call (as the Go completer batches
   * them); should that call fail, each is written alone, retried on connection errors
   * until the lease would have run out (a retry after a lost reply says lost).
   */
  private async finish(job: Job, o: Outcome): Promise<void> {
    job._finishing = true;
    let status = await this.finishBatched(job, o);
    if (status === undefined) {
      status = await this.finishAlone(job, o);
      if (status === undefined) {
        return;
      }
    }
    if (status === "lost") {
      if (job._completedInTx === null) {
        this.log.warn(`skiplock: job ${job.id} (${job.kind}): lease lost; its outcome was not recorded`);
      }
    } else {
      this.log.debug(`skiplock: job ${job.id} (${job.kind}) is ${status}`);
    }
    this.report(job, status);
  }
}
