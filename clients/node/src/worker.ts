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
  /** @internal Made on first use: most jobs never look at their signal. */ _ac: AbortController | null = null;
  /** @internal */ _client: PoolClient | null = null;
  /** @internal */ _inTx = false;
  /** @internal */ _completedInTx: "committed" | "pending" | "external" | null = null;
  /** @internal */ _finishing = false;
  /** @internal */ readonly _schema: string;
  /** @internal run_at, ms since the epoch: with priority and id, the claim's order. */ readonly _runAt: number;

  /** @internal */
  constructor(row: ClaimTuple, schema: string) {
    this.id = row[0];
    this.kind = row[1];
    this.args = row[2];
    this.attempt = row[3];
    this.maxAttempts = row[4];
    this.priority = row[5];
    this.metadata = row[6];
    this.tags = row[7];
    this.createdAt = new Date(row[8]);
    this.leaseToken = row[9];
    this.leaseUntil = new Date(row[10]);
    this._runAt = row[11];
    this._schema = schema;
  }

  /** Aborted when a heartbeat finds the lease lost, or when the worker's shutdown timeout passes. */
  get signal(): AbortSignal {
    if (this._ac === null) {
      this._ac = new AbortController();
    }
    return this._ac.signal;
  }

  /** True once a heartbeat found the lease lost: stop working, nothing will be kept. */
  get leaseLost(): boolean {
    return this._aborted && this.signal.reason instanceof LeaseLost;
  }

  /** @internal Whether signal is aborted, without making one. */
  get _aborted(): boolean {
    return this._ac !== null && this._ac.signal.aborted;
  }

  /** @internal Aborts signal with reason. */
  _abort(reason: Error): void {
    if (this._ac === null) {
      this._ac = new AbortController();
    }
    this._ac.abort(reason);
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

/**
 * @internal One claimed job as the claim's JSON text carries it: id, kind, args,
 * attempt, max_attempts, priority, metadata, tags, created_at, lease_token, lease_until,
 * run_at (the times in milliseconds since the epoch).
 */
export type ClaimTuple = [
  string,
  string,
  any,
  number,
  number,
  number,
  Record<string, unknown> | null,
  string[] | null,
  number,
  string,
  number,
  number,
];

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

/**
 * Claims in flight at once, each on its own connection, splitting the places between
 * them: one claim's jobs run while the other's statement does, so the handlers do not
 * wait for the database through a whole round trip. A worker of concurrency 1 keeps
 * one: its jobs start in the strict order of the claims (two claims side by side skip
 * each other's rows, so a job of the first may start before a higher-priority one the
 * second brings).
 */
const CLAIMS = 2;

/** finish_jobs calls in flight at once, each on its own connection. */
const FLUSHES = 2;

/** The most outcomes one finish_jobs call carries. */
const FLUSH_BATCH = 1000;

/** One outcome, as finish_jobs takes it (docs/sql_workers.md); delay in microseconds. */
interface Outcome {
  action: "complete" | "retry" | "fail" | "snooze" | "cancel";
  delay?: number | null;
  error?: string | null;
  output?: string | null;
}

/** An outcome waiting for its finish_jobs call. */
interface Pending {
  job: Job;
  o: Outcome;
}

/** Whether a comes before b in the claim's order: priority descending, run_at, id. */
function claimedBefore(a: Job, b: Job): boolean {
  if (a.priority !== b.priority) {
    return a.priority > b.priority;
  }
  if (a._runAt !== b._runAt) {
    return a._runAt < b._runAt;
  }
  return a.id < b.id; // lowercase hex: the text's order is the uuid's
}

/** Merges two lists of claimed jobs, each in the claim's order, into one. */
function mergeClaimed(a: Job[], b: Job[]): Job[] {
  const out: Job[] = new Array(a.length + b.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.length && j < b.length) {
    out[k++] = claimedBefore(b[j], a[i]) ? b[j++] : a[i++];
  }
  while (i < a.length) {
    out[k++] = a[i++];
  }
  while (j < b.length) {
    out[k++] = b[j++];
  }
  return out;
}

/** seconds as finish_jobs' delay, in microseconds: a negative one is 0. */
function delayUs(seconds: number): number {
  return Math.round(Math.max(0, seconds) * 1e6);
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
  /** finish_jobs over one JSON array of [id, token, action, delay µs, error, output], its statuses as one text. */
  private readonly finishSQL: string;
  /** Claims in flight at once: CLAIMS, one at concurrency 1. */
  private readonly claims: number;
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
  /** Jobs asked for by the claims in flight. */
  private claiming = 0;
  /** Resolves once the last claim issued has put its jobs in the buffer (they go in claim order). */
  private delivered: Promise<void> = Promise.resolve();
  /** Claimers waiting for places: a finished job wakes them. */
  private placeWaiters = new Set<() => void>();
  /** Claimers waiting for jobs: a NOTIFY wakes one, the poll each. */
  private jobWaiters = new Set<() => void>();
  /**
   * Claimers parked while the queue is drained and another claimer watches it: one
   * claimer is enough for a trickle of jobs. A claim that comes back full wakes one.
   */
  private parked = new Set<() => void>();
  /** Moving average of the handlers' run times in ms (0: none ran yet). */
  private avgRunMs = 0;
  private tasks = new Set<Promise<void>>();
  /** Handlers' connections kept between jobs (at most concurrency), so a job takes one at once. */
  private spare: PoolClient[] = [];
  /** Connections connect() listens to for errors; those that failed. */
  private watched = new WeakSet<PoolClient>();
  private failed = new WeakSet<PoolClient>();
  /** A NOTIFY arrived since the last claim went out: the next wait for jobs is skipped. */
  private woken = false;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private beating = false;
  private lastReclaim = 0;
  private runPromise: Promise<void> | null = null;
  /** Outcomes waiting for a finish_jobs call, and the calls in flight. */
  private outcomes: Pending[] = [];
  private flushes = 0;
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
    this.claims = concurrency > 1 ? CLAIMS : 1;
    this.prefetch = prefetch;
    this.prefetchWindow = prefetchWindow;
    this.name = opts.name ?? defaultName();
    this.lease = lease;
    this.pollInterval = pollInterval;
    this.shutdownTimeout = shutdownTimeout;
    this.reclaim = opts.reclaim ?? true;
    this.schema = opts.schema ?? DEFAULT_SCHEMA;
    this.s = quoteIdent(this.schema);
    this.finishSQL =
      `SELECT string_agg(f.status, ',' ORDER BY f.n) FROM (SELECT ` +
      `array_agg((v->>0)::uuid ORDER BY x.n) AS ids, array_agg((v->>1)::uuid ORDER BY x.n) AS tokens, ` +
      `array_agg(v->>2 ORDER BY x.n) AS actions, ` +
      `array_agg((v->>3)::bigint * interval '1 microsecond' ORDER BY x.n) AS delays, ` +
      `array_agg(v->>4 ORDER BY x.n) AS errors, array_agg((v->>5)::jsonb ORDER BY x.n) AS outputs ` +
      `FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS x(v, n)) AS a, ` +
      `${this.s}.finish_jobs(a.ids, a.tokens, a.actions, a.delays, a.errors, a.outputs) WITH ORDINALITY AS f(job_id, status, n)`;
    this.log = opts.logger ?? consoleLogger;
    this.onOutcome = opts.onOutcome;
    this.handleSignals = opts.handleSignals ?? true;
    this.poolConfig = {
      ...opts.pool,
      connectionString,
      // One connection per running handler, plus the claims', the outcomes' and the
      // heartbeater's.
      max: concurrency + CLAIMS + FLUSHES + 1,
      application_name: `skiplock node worker ${this.name}`.slice(0, 63),
    };
  }

  /** Asks run() to stop gracefully; safe to call any time, any number of times. */
  stop(): void {
    this.stopping = true;
    for (const w of [...this.placeWaiters, ...this.jobWaiters, ...this.parked]) {
      w();
    }
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
      for (const c of this.spare.splice(0)) {
        c.release();
      }
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
    // An outcome's write starts as its handler ends: wait for those too.
    const done = (async () => {
      while (this.tasks.size > 0) {
        await Promise.all([...this.tasks]);
      }
      return false;
    })();
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
        j._abort(new Error("skiplock: the worker stopped"));
      }
    }
  }

  /** A NOTIFY: wakes one claimer waiting for jobs (one claim finds the new job). */
  private wake(): void {
    this.woken = true;
    const w = this.jobWaiters.values().next();
    if (!w.done) {
      w.value();
    }
  }

  /**
   * Resolves after seconds, or at once when woken: a claimer waiting for jobs by a
   * NOTIFY (at once if one arrived since the last claim went out), one waiting for
   * places by a finished job; both by stop().
   */
  private sleep(seconds: number, forPlaces = false): Promise<void> {
    if (this.stopping) {
      return Promise.resolve();
    }
    if (!forPlaces && this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    const waiters = forPlaces ? this.placeWaiters : this.jobWaiters;
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(t);
        waiters.delete(done);
        resolve();
      };
      const t = setTimeout(done, seconds * 1000);
      waiters.add(done);
    });
  }

  private async claimLoop(): Promise<void> {
    const kinds = [...this.handlers.keys()].sort();
    // The claim commits asynchronously (set_config, as Go's claim does): a claim lost
    // in a crash leaves the job pending, and an outcome, which commits synchronously,
    // makes its claim durable too (docs/sql_workers.md). The jobs come back as one JSON
    // text (JSON.parse decodes it faster than the driver decodes each column of each
    // row), in the claim's order, its times in milliseconds since the epoch.
    const sql =
      `SELECT json_agg(json_build_array(c.id, c.kind, c.args, c.attempt, c.max_attempts, c.priority, c.metadata, ` +
      `c.tags, extract(epoch FROM c.created_at) * 1000, c.lease_token, extract(epoch FROM c.lease_until) * 1000, ` +
      `extract(epoch FROM c.run_at) * 1000) ORDER BY c.n)::text ` +
      `FROM (SELECT set_config('synchronous_commit', 'off', true)) AS s, ` +
      `${this.s}.claim_jobs($1, $2, n => $3, lease => $4::interval, kinds => $5) WITH ORDINALITY ` +
      `AS c(id, kind, args, attempt, max_attempts, priority, run_at, metadata, tags, created_at, lease_token, lease_until, n)`;
    const claimers: Promise<void>[] = [];
    for (let i = 0; i < this.claims; i++) {
      claimers.push(this.claimer(sql, kinds));
    }
    await Promise.all(claimers);
  }

  /** One of the claims claim loops. */
  private async claimer(sql: string, kinds: string[]): Promise<void> {
    const lease = interval(this.lease);
    let backoff = 0.1;
    while (!this.stopping) {
      // As Go's producer: while jobs wait in the buffer (or are being claimed), a claim
      // waits for a quarter of the places to be free, so that each round trip brings a
      // batch; the places are split between the claims in flight.
      const limit = this.limit();
      const ahead = this.buffer.length + this.claiming;
      const free = limit - this.active - ahead;
      if (free <= 0 || (ahead > 0 && free < limit / 4) || this.held >= MAX_HELD) {
        await this.sleep(this.pollInterval, true);
        continue;
      }
      const n = Math.min(free, 1000, Math.ceil(limit / this.claims));
      this.woken = false;
      this.claiming += n;
      const before = this.delivered;
      let deliver: () => void = () => undefined;
      this.delivered = new Promise<void>((resolve) => {
        deliver = resolve;
      });
      let text: string | null = null;
      let failed: unknown = undefined;
      try {
        const res = await this.pool!.query<[string | null]>({ text: sql, values: [this.queue, this.name, n, lease, kinds], rowMode: "array" });
        text = res.rows[0]?.[0] ?? null;
      } catch (e) {
        failed = e ?? new Error("claim failed");
      }
      const jobs: Job[] = [];
      if (text !== null) {
        const rows = JSON.parse(text) as ClaimTuple[];
        for (let i = 0; i < rows.length; i++) {
          const job = new Job(rows[i], this.schema);
          this.running.set(job.id, job); // held, so heartbeated, from here on
          jobs.push(job);
        }
      }
      const got = jobs.length;
      // Delivered one claim after the other, each merged into the jobs still waiting in
      // the claim's order: two claims in flight ran side by side, each skipping the
      // other's rows, and the handlers take their jobs as one claim would give them.
      await before;
      this.claiming -= n;
      if (this.buffer.length === 0) {
        this.buffer = jobs;
      } else {
        this.buffer = mergeClaimed(this.buffer, jobs);
      }
      deliver();
      if (failed !== undefined) {
        if (transient(failed)) {
          this.log.warn(`skiplock: claiming from ${this.queue} failed (retrying): ${(failed as Error).message}`);
        } else {
          this.log.error(`skiplock: claiming from ${this.queue} refused: ${(failed as Error).message}`);
          backoff = Math.max(backoff, this.pollInterval);
        }
        await this.sleep(backoff);
        backoff = Math.min(backoff * 2, 30);
        continue;
      }
      backoff = 0.1;
      this.startJobs();
      if (got < n) {
        if (this.jobWaiters.size > 0 || this.claiming > 0) {
          // The queue is drained and another claimer watches it: park until a backlog.
          await new Promise<void>((resolve) => {
            const done = (): void => {
              this.parked.delete(done);
              resolve();
            };
            this.parked.add(done);
            if (this.stopping) {
              done();
            }
          });
        } else {
          // The queue is drained for now: wait for a NOTIFY or the poll.
          await this.sleep(this.pollInterval);
        }
      } else {
        // A backlog: the other claimers claim too.
        for (const w of [this.parked.values().next(), this.jobWaiters.values().next()]) {
          if (!w.done) {
            w.value();
          }
        }
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
    if (this.placeWaiters.size > 0) {
      for (const w of [...this.placeWaiters]) {
        w();
      }
    }
  }

  /** Starts buffered jobs on the free handlers. */
  private startJobs(): void {
    while (this.active < this.concurrency && this.buffer.length > 0 && !this.stopping) {
      const job = this.buffer.shift()!;
      if (job._aborted) {
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
      job._finishing = true;
      this.held++;
      this.outcomes.push({ job, o: { action: "snooze", delay: 0 } });
    }
    this.flushMore();
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
      const held = [...this.running.values()].filter((j) => !j._aborted);
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
            job._abort(new LeaseLost(`skiplock: lease lost for job ${job.id}`));
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
        client = this.spare.pop() ?? (await this.connect());
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
        if (broken === undefined && !this.stopping && !this.failed.has(client)) {
          this.spare.push(client); // the next job takes it without a trip through the pool
        } else {
          client.release(broken ?? this.failed.has(client));
        }
      }
    } finally {
      this.active--;
      if (o === null) {
        this.running.delete(job.id);
      } else {
        job._finishing = true;
        this.held++;
        this.outcomes.push({ job, o });
        this.flushMore();
      }
      this.startJobs();
      this.placeFreed();
    }
  }

  /**
   * A connection from the pool for a handler, watched for failing while it is kept
   * between jobs (spare): a failed one goes back to the pool to be closed.
   */
  private async connect(): Promise<PoolClient> {
    for (;;) {
      const c = await this.pool!.connect();
      if (!this.watched.has(c)) {
        this.watched.add(c);
        c.on("error", (e) => {
          this.failed.add(c);
          const i = this.spare.indexOf(c);
          if (i >= 0) {
            this.spare.splice(i, 1);
            c.release(true);
          }
          this.log.debug(`skiplock: a handler's connection failed: ${e.message}`);
        });
      }
      if (!this.failed.has(c)) {
        return c;
      }
      c.release(true);
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
        return { action: "snooze", delay: delayUs(e.delay) };
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
      const delay = e instanceof Retry && e.delay !== undefined ? delayUs(e.delay) : null;
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

  /**
   * Starts finish_jobs calls for the outcomes waiting, up to FLUSHES in flight: the
   * outcomes of jobs that finish together are written together (as the Go completer
   * batches them), and while one call runs the next batch gathers.
   */
  private flushMore(): void {
    while (this.flushes < FLUSHES && this.outcomes.length > 0) {
      let batch: Pending[];
      if (this.outcomes.length <= FLUSH_BATCH) {
        batch = this.outcomes;
        this.outcomes = [];
      } else {
        batch = this.outcomes.splice(0, FLUSH_BATCH);
      }
      this.flushes++;
      const task = this.flush(batch).finally(() => {
        this.tasks.delete(task);
      });
      this.tasks.add(task);
    }
  }

  /**
   * Writes batch in one finish_jobs call, fenced by each job's token, then lets its jobs
   * go. Should the call fail, each outcome is written alone (finishAlone).
   */
  private async flush(batch: Pending[]): Promise<void> {
    let statuses: string[] | null = null;
    try {
      // The outcomes travel as one JSON array and their statuses come back as one text,
      // as the Python client sends them (docs/sql_workers.md).
      const payload: unknown[] = new Array(batch.length);
      for (let i = 0; i < batch.length; i++) {
        const { job, o } = batch[i];
        payload[i] = [job.id, job.leaseToken, o.action, o.delay ?? null, o.error ?? null, o.output ?? null];
      }
      const res = await this.pool!.query<[string | null]>({ text: this.finishSQL, values: [JSON.stringify(payload)], rowMode: "array" });
      statuses = (res.rows[0]?.[0] ?? "").split(",");
    } catch (e) {
      if (batch.length > 1 || transient(e)) {
        this.log.debug(`skiplock: writing ${batch.length} outcome(s) at once failed (writing each alone): ${(e as Error).message}`);
      }
    } finally {
      this.flushes--;
      this.flushMore();
    }
    if (statuses === null) {
      await Promise.all(batch.map((b) => this.recordAlone(b.job, b.o)));
      return;
    }
    for (let i = 0; i < batch.length; i++) {
      this.settle(batch[i].job, (statuses[i] as OutcomeStatus | undefined) ?? "lost");
    }
  }

  /** Writes o alone (its batch failed): a complete whose output is refused becomes a retry. */
  private async recordAlone(job: Job, o: Outcome): Promise<void> {
    let status: OutcomeStatus | undefined;
    try {
      try {
        status = await this.finishAlone(job, o);
      } catch (e) {
        if (!(e instanceof OutputRefused)) {
          throw e;
        }
        status = await this.finishAlone(job, { action: "retry", error: cleanText(`the handler's output was refused: ${e.message}`) });
      }
    } catch (e) {
      this.log.error(`skiplock: job ${job.id} (${job.kind}): recording its outcome failed; it will run again: ${(e as Error).message}`);
    }
    this.settle(job, status);
  }

  /** Reports a recorded outcome's status (undefined: none was recorded), then lets the job go. */
  private settle(job: Job, status: OutcomeStatus | undefined): void {
    if (status === "lost" && job._completedInTx === null) {
      this.log.warn(`skiplock: job ${job.id} (${job.kind}): lease lost; its outcome was not recorded`);
    }
    if (status !== undefined) {
      this.report(job, status);
    }
    this.running.delete(job.id);
    this.held--;
    this.placeFreed();
  }

  /** Writes o alone on the job's connection; undefined when it was refused or gave up. */
  private async finishAlone(job: Job, o: Outcome): Promise<OutcomeStatus | undefined> {
    const deadline = Date.now() + this.lease * 1000;
    let backoff = 100;
    const c: Queryable = this.pool!;
    for (;;) {
      try {
        const res = await c.query<[string | null]>({
          text: this.finishSQL,
          values: [JSON.stringify([[job.id, job.leaseToken, o.action, o.delay ?? null, o.error ?? null, o.output ?? null]])],
          rowMode: "array",
        });
        return (res.rows[0]?.[0] as OutcomeStatus | null) ?? "lost";
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
}
