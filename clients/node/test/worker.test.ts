// The Node client against a real skiplock schema. Run from the repository root by
// `go test -run TestNodeClient .`, which starts PostgreSQL, migrates a schema, builds
// the package and sets SKIPLOCK_TEST_DSN and SKIPLOCK_TEST_SCHEMA.

import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Pool } from "pg";

import { Cancel, Job, LeaseLost, OutcomeStatus, Permanent, Retry, Snooze, Worker, WorkerOptions, cleanText, enqueue } from "../src/index";

const DSN = process.env.SKIPLOCK_TEST_DSN ?? "";
const SCHEMA = process.env.SKIPLOCK_TEST_SCHEMA ?? "";
const S = `"${SCHEMA}"`;
const silent = { debug() {}, info() {}, warn() {}, error() {} };

/** Polls cond until it holds (the condition is the synchronisation; the poll only paces). */
async function waitFor(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 20000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A promise and its resolver: a handler waits on it until the test releases it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

describe("skiplock node client", { skip: DSN === "" || SCHEMA === "" ? "SKIPLOCK_TEST_DSN and SKIPLOCK_TEST_SCHEMA are not set (run it through go test)" : false }, () => {
  let db: Pool;
  const workers: Worker[] = [];
  before(async () => {
    db = new Pool({ connectionString: DSN, max: 4 });
    await db.query(`CREATE TABLE IF NOT EXISTS ${S}.node_effects (job_id uuid, attempt int)`);
  });
  after(async () => {
    for (const w of workers) {
      w.stop();
      await w.run();
    }
    await db.end();
  });

  async function row(id: string): Promise<any> {
    const r = await db.query(
      `SELECT status::text AS status, attempts, last_error, output, extract(epoch FROM run_at - now()) AS wait,
              attempt_history, lease_token, lease_until, run_at, updated_at FROM ${S}.jobs WHERE id = $1`,
      [id],
    );
    return r.rows[0];
  }

  function start(queue: string, handlers: Record<string, (job: Job) => unknown>, opts: WorkerOptions = {}): Worker {
    const w = new Worker(DSN, handlers, { queue, schema: SCHEMA, pollInterval: 0.1, logger: silent, handleSignals: false, ...opts });
    void w.run();
    workers.push(w);
    return w;
  }

  /** Expires a running job's lease and reclaims it, in one transaction, to run again after delay. */
  async function expireAndReclaim(id: string, queue: string, delay: string): Promise<void> {
    const c = await db.connect();
    try {
      await c.query("BEGIN");
      await c.query(`UPDATE ${S}.jobs SET lease_until = now() - interval '1 second' WHERE id = $1 AND status = 'running'`, [id]);
      const r = await c.query(`SELECT ${S}.reclaim_jobs($1, 100, $2::interval) AS n`, [queue, delay]);
      await c.query("COMMIT");
      assert.equal(r.rows[0].n, 1, "reclaimed one job");
    } finally {
      c.release();
    }
  }

  it("enqueues and completes, with deduplication", async () => {
    const queue = "node_complete";
    const ids: string[] = [];
    for (const name of ["ann", "bob", "cy"]) {
      ids.push((await enqueue(db, "greet", { name }, { queue, schema: SCHEMA })).id);
    }
    const first = await enqueue(db, "greet", {}, { queue, schema: SCHEMA, deduplicationKey: "k" });
    const again = await enqueue(db, "greet", {}, { queue, schema: SCHEMA, deduplicationKey: "k" });
    assert.deepEqual(again, { id: first.id, duplicate: true });
    start(queue, { greet: (job) => ({ hello: job.args.name ?? null, attempt: job.attempt }) }, { concurrency: 2 });
    await waitFor("every job to succeed", async () => {
      for (const id of [...ids, first.id]) {
        if ((await row(id)).status !== "succeeded") return false;
      }
      return true;
    });
    assert.deepEqual((await row(ids[0])).output, { hello: "ann", attempt: 1 });
  });

  it("refuses a bad enqueue argument, naming it", async () => {
    await assert.rejects(enqueue(db, "greet", {}, { queue: "9bad", schema: SCHEMA }), (e: any) => e.code === "22023" && e.column === "queue");
  });

  it("records every outcome", async () => {
    const queue = "node_outcomes";
    const outcomes = new Map<string, OutcomeStatus>();
    const kinds = ["boom", "perm", "snooze", "cancel", "later", "unserialisable"];
    const ids: Record<string, string> = {};
    for (const k of kinds) ids[k] = (await enqueue(db, k, {}, { queue, schema: SCHEMA })).id;
    const last = (await enqueue(db, "boom", {}, { queue, schema: SCHEMA, maxAttempts: 1 })).id;
    start(
      queue,
      {
        boom: () => {
          throw new TypeError("boom\0");
        },
        perm: () => {
          throw new Permanent("bad address");
        },
        snooze: () => {
          throw new Snooze(3600);
        },
        cancel: async () => {
          throw new Cancel("withdrawn");
        },
        later: () => {
          throw new Retry("later", 7200);
        },
        unserialisable: () => ({ n: BigInt(1) }),
      },
      { concurrency: 3, onOutcome: (job, status) => outcomes.set(job.id, status) },
    );
    await waitFor("every job to be worked", () => outcomes.size === kinds.length + 1);
    let j = await row(ids.boom);
    assert.deepEqual([j.status, j.attempts, j.last_error], ["pending", 1, "TypeError: boom\uFFFD"]);
    assert.ok(j.wait > 0 && j.wait <= 1.1, `retry in ${j.wait}s`);
    assert.equal(outcomes.get(ids.boom), "pending");
    assert.equal((await row(last)).status, "failed");
    assert.equal(outcomes.get(last), "failed");
    j = await row(ids.perm);
    assert.deepEqual([j.status, j.last_error], ["failed", "bad address"]);
    j = await row(ids.snooze);
    assert.deepEqual([j.status, j.attempts], ["pending", 0]);
    assert.ok(j.wait > 3590 && j.wait <= 3600, `snoozed ${j.wait}s`);
    j = await row(ids.cancel);
    assert.deepEqual([j.status, j.last_error], ["cancelled", "withdrawn"]);
    j = await row(ids.later);
    assert.ok(j.wait > 7190 && j.wait <= 7200, `retry in ${j.wait}s`);
    j = await row(ids.unserialisable);
    assert.equal(j.status, "pending");
    assert.match(j.last_error, /^the handler's output was refused: not JSON/);
    assert.equal(j.attempt_history.at(-1).outcome, "retried");
  });

  it("completes in the handler's transaction, and not when the lease was lost", async () => {
    const queue = "node_tx";
    const ok = (await enqueue(db, "charge", { n: 1 }, { queue, schema: SCHEMA })).id;
    const g = gate();
    let started: (id: string) => void = () => undefined;
    const running = new Promise<string>((r) => (started = r));
    const outcomes = new Map<string, OutcomeStatus>();
    const errors = new Map<string, unknown>();
    start(
      queue,
      {
        charge: async (job) => {
          if (job.args.n === 2) {
            started(job.id);
            await g.wait;
          }
          try {
            await job.transaction(async (tx) => {
              await tx.query(`INSERT INTO ${S}.node_effects VALUES ($1, $2)`, [job.id, job.attempt]);
              await job.completeTx({ charged: job.args.n });
            });
          } catch (e) {
            errors.set(job.id, e);
            throw e;
          }
        },
      },
      { onOutcome: (job, status) => outcomes.set(job.id, status) },
    );
    await waitFor("the first job to succeed", () => outcomes.has(ok));
    assert.equal(outcomes.get(ok), "succeeded");
    assert.deepEqual((await row(ok)).output, { charged: 1 });
    const lost = (await enqueue(db, "charge", { n: 2 }, { queue, schema: SCHEMA })).id;
    assert.equal(await running, lost);
    await expireAndReclaim(lost, queue, "1 hour");
    g.open();
    await waitFor("the stale job's handler to end", () => outcomes.has(lost));
    assert.equal(outcomes.get(lost), "lost");
    assert.ok(errors.get(lost) instanceof LeaseLost);
    const effects = await db.query(`SELECT job_id::text AS id FROM ${S}.node_effects ORDER BY 1`);
    assert.deepEqual(effects.rows.map((r) => r.id), [ok], "the stale attempt's write did not commit");
    const j = await row(lost);
    assert.deepEqual([j.status, j.attempts, j.output], ["pending", 1, null]);
    assert.match(j.last_error, /^lease expired on worker/);
  });

  it("reports a stale completion as lost and changes nothing", async () => {
    const queue = "node_stale";
    const id = (await enqueue(db, "slow", {}, { queue, schema: SCHEMA })).id;
    const g = gate();
    let started: () => void = () => undefined;
    const running = new Promise<void>((r) => (started = r));
    const outcomes = new Map<string, OutcomeStatus>();
    start(queue, { slow: async () => { started(); await g.wait; return { late: true }; } }, { onOutcome: (job, s) => outcomes.set(job.id, s) });
    await running;
    await expireAndReclaim(id, queue, "1 hour");
    const before = await row(id);
    g.open();
    await waitFor("the stale completion", () => outcomes.has(id));
    assert.equal(outcomes.get(id), "lost");
    const after = await row(id);
    delete before.wait;
    delete after.wait;
    assert.deepEqual(after, before, "the stale completion changed nothing");
  });

  it("heartbeats the lease and aborts job.signal when an operator cancels the job", async () => {
    const queue = "node_beat";
    const id = (await enqueue(db, "long", {}, { queue, schema: SCHEMA })).id;
    let firstUntil: Date | undefined;
    const outcomes = new Map<string, OutcomeStatus>();
    let sawAbort = false;
    start(
      queue,
      {
        long: async (job) => {
          firstUntil = job.leaseUntil;
          await once(job.signal, "abort");
          sawAbort = job.leaseLost;
          return { finished: true };
        },
      },
      { lease: 1, onOutcome: (job, s) => outcomes.set(job.id, s) },
    );
    await waitFor("a heartbeat to extend the lease", async () => {
      const j = await row(id);
      return firstUntil !== undefined && j.lease_until !== null && j.lease_until > firstUntil;
    });
    await db.query(`UPDATE ${S}.jobs SET status = 'cancelled', lease_token = NULL, lease_until = NULL, last_error = 'operator' WHERE id = $1`, [id]);
    await waitFor("the handler to see its lease lost", () => outcomes.has(id));
    assert.ok(sawAbort, "job.leaseLost was true when the signal aborted");
    assert.equal(outcomes.get(id), "lost");
    assert.equal((await row(id)).status, "cancelled");
  });

  it("works a backlog in strict priority order at concurrency 1", async () => {
    const queue = "node_order";
    // 1,200 jobs of five priorities, committed together: after the first job (a claim of
    // one), claims of up to 1,000 ahead. Two claims side by side would skip each other's
    // rows, and a job of the first could start before a higher-priority one of the second.
    await db.query(`SELECT ${S}.enqueue('ordered', jsonb_build_object('i', g), queue => $1, priority => g % 5) FROM generate_series(1, 1200) AS g`, [queue]);
    const seen: number[] = [];
    start(queue, { ordered: (job) => void seen.push(job.priority) }, { concurrency: 1 });
    await waitFor("every job to succeed", async () => {
      const r = await db.query(`SELECT count(*)::int AS n FROM ${S}.jobs WHERE queue = $1 AND status = 'succeeded'`, [queue]);
      return r.rows[0].n === 1200;
    });
    assert.equal(seen.length, 1200);
    for (let i = 1; i < seen.length; i++) {
      assert.ok(seen[i] <= seen[i - 1], `job ${i + 1} (priority ${seen[i]}) ran after one of priority ${seen[i - 1]}`);
    }
  });

  it("replaces a handler's connection that fails between jobs", async () => {
    const queue = "node_spare";
    const pids: number[] = [];
    start(queue, { pid: async (job) => pids.push((await job.client.query("SELECT pg_backend_pid() AS p")).rows[0].p) }, { concurrency: 1 });
    const first = (await enqueue(db, "pid", {}, { queue, schema: SCHEMA })).id;
    await waitFor("the first job to succeed", async () => (await row(first)).status === "succeeded");
    // The connection the handler kept for its next job dies while it waits.
    await db.query("SELECT pg_terminate_backend($1)", [pids[0]]);
    const second = (await enqueue(db, "pid", {}, { queue, schema: SCHEMA })).id;
    await waitFor("the second job to succeed", async () => (await row(second)).status === "succeeded");
    assert.notEqual(pids[pids.length - 1], pids[0], "the second job ran on a new connection");
  });

  it("refuses bad options", () => {
    assert.throws(() => new Worker(DSN, {}), /at least one kind/);
    assert.throws(() => new Worker(DSN, { a: () => 1 }, { concurrency: 0 }), RangeError);
    assert.throws(() => new Worker(DSN, { a: () => 1 }, { lease: 0.5 }), RangeError);
    assert.throws(() => new Worker(DSN, { a: "x" as any }), TypeError);
    assert.equal(cleanText("a\0b\uD800c"), "a\uFFFDb\uFFFDc");
  });

  /** Starts test/fixtures/worker in a child process on queue; resolves once its handler started a job. */
  function child(queue: string, mode: string): { proc: ReturnType<typeof spawn>; started: Promise<string> } {
    const proc = spawn(process.execPath, [join(__dirname, "fixtures", "child.js"), queue, mode], {
      env: process.env,
      stdio: ["ignore", "pipe", "inherit"],
    });
    const started = new Promise<string>((resolve, reject) => {
      let buf = "";
      proc.stdout!.on("data", (d: Buffer) => {
        buf += d.toString();
        const m = /started (\S+)/.exec(buf);
        if (m) resolve(m[1]);
      });
      proc.on("exit", (code) => reject(new Error(`child exited ${code} before starting a job`)));
    });
    return { proc, started };
  }

  it("stops gracefully on SIGTERM: the running handler finishes, nothing more is claimed", async () => {
    const queue = "node_sigterm";
    const a = (await enqueue(db, "job", { n: 1 }, { queue, schema: SCHEMA })).id;
    const { proc, started } = child(queue, "finish-on-term");
    assert.equal(await started, a);
    const b = (await enqueue(db, "job", { n: 2 }, { queue, schema: SCHEMA })).id;
    proc.kill("SIGTERM");
    const [code] = await once(proc, "exit");
    assert.equal(code, 0);
    assert.equal((await row(a)).status, "succeeded");
    assert.equal((await row(b)).status, "pending", "nothing claimed after SIGTERM");
  });

  it("a SIGKILLed worker's job is reclaimed and run again", async () => {
    const queue = "node_sigkill";
    const id = (await enqueue(db, "job", {}, { queue, schema: SCHEMA })).id;
    const { proc, started } = child(queue, "hang");
    assert.equal(await started, id);
    proc.kill("SIGKILL");
    await once(proc, "exit");
    await db.query(`UPDATE ${S}.jobs SET lease_until = now() - interval '1 second' WHERE id = $1`, [id]);
    const outcomes = new Map<string, OutcomeStatus>();
    // This worker's own reclaimer returns the dead worker's job (delay: the default backoff).
    start(queue, { job: (job) => ({ attempt: job.attempt }) }, { lease: 1, onOutcome: (job, s) => outcomes.set(job.id, s) });
    await waitFor("the job to run again", () => outcomes.get(id) === "succeeded");
    const j = await row(id);
    assert.deepEqual([j.status, j.attempts, j.output], ["succeeded", 2, { attempt: 2 }]);
    assert.equal(j.attempt_history[0].outcome, "lease_expired");
  });
});
