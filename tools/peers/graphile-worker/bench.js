// skiplock bench's W5, W6 and W10 shapes, run against graphile-worker, so that its figures
// sit beside skiplock's from the same machine and server (docs/benchmarks.md, "Peers
// measured on this machine"). Not part of skiplock; run by hand:
//
//   npm install
//   URL=postgres://… node bench.js w3
//   URL=postgres://… node bench.js w5 <concurrentJobs> <localQueue size> <runners>
//   URL=postgres://… node bench.js w6
//   URL=postgres://… node bench.js w10 [scale]
//
// The database must be a throwaway one: each run drops and recreates the
// graphile_worker schema.
//
// W3: 100,000 no-op jobs inserted by 2 concurrent loops in batches of 1,000, each batch
// one addJobs call (graphile-worker's bulk insert, one statement) through a pool of 2
// connections, as skiplock's W3 enqueues its batches from 2 goroutines; the rows are
// counted afterwards.
//
// W5: 50,000 no-op jobs inserted before the clock (addJobs, batches of 1,000, then a
// CHECKPOINT, as skiplock's backlog workloads do); the clock runs from the first
// runner's start until every job's handler has run. Each job's runs are counted: a
// job run other than once is reported. 0 for the local queue size runs without it
// (and without batched completions); otherwise completions are batched with no delay,
// graphile-worker's documented throughput settings.
//
// W6: defaults; 40 warm-up jobs, then 2,000 addJob calls at 200/s, open loop (each
// call is started on schedule whether or not the earlier ones returned), timed from
// just before addJob to the handler's first line, in one process.
//
// W10: 800 addJob calls a second, open loop, while another session pins the vacuum
// horizon. The run is cut into windows of 10 s × scale (scale 1 unless given, 100 ms at
// least): 3 baseline windows, 60 in which a separate connection sits idle in a
// REPEATABLE READ transaction that has read the jobs table (_private_jobs) and taken an
// xid, and 9 of recovery after it rolls back. A timer every 5 ms starts every call that
// has fallen due (job i at i/800 s), each its own promise. Set up as W6, except
// concurrentJobs 100, as skiplock's MaxWorkers 100 in its own W10, addJob through a pool
// of 40 connections, as skiplock's W10 enqueues, and a logger that drops the line per
// job; every other setting, the worker's pool of 10 connections included, is
// graphile-worker's default. Each job is put in the window in which its addJob began;
// per window: offered and completed rates, the pickup's p50 and p99 (addJob begun →
// handler's first line), the p99 of the addJob call alone and of the rest (returned →
// handler), and the table's n_dead_tup at the window's end. The rule is skiplock's: no
// pin window's p99 above twice the baseline's (the median of its windows'), and every
// window after the first completing at least 95% of what it was offered.
"use strict";
const { run, makeWorkerUtils, Logger } = require("graphile-worker");
const { Client, Pool } = require("pg");

const cs = process.env.URL;
const now = () => Number(process.hrtime.bigint()) / 1e6; // milliseconds
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), n = s.length;
  return n % 2 === 1 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
};
const sleepUntil = (t) => new Promise((resolve) => setTimeout(resolve, Math.max(t - now(), 0)));

// quietLogger logs warnings and errors only: the default logger writes a line per job,
// which costs a throughput run (W5) its console writes and a latency run its lines.
const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile-worker] ${level}: ${message}`);
});

async function freshSchema() {
  const pool = new Pool({ connectionString: cs });
  await pool.query("DROP SCHEMA IF EXISTS graphile_worker CASCADE");
  await pool.end();
  const utils = await makeWorkerUtils({ connectionString: cs });
  await utils.migrate();
  return utils;
}

async function w5(concurrentJobs, localQueue, runners) {
  const total = 50000;
  const utils = await freshSchema();
  for (let from = 0; from < total; from += 1000) {
    const jobs = [];
    for (let i = from; i < from + 1000; i++) jobs.push({ identifier: "noop", payload: { i } });
    await utils.addJobs(jobs);
  }
  await utils.withPgClient((c) => c.query("CHECKPOINT"));
  const runs = new Uint8Array(total);
  let done = 0;
  let finish;
  const allDone = new Promise((resolve) => (finish = resolve));
  const worker = { connectionString: cs, concurrentJobs, maxPoolSize: concurrentJobs + 1, logger: quietLogger };
  if (localQueue > 0) Object.assign(worker, { localQueue: { size: localQueue }, completeJobBatchDelay: 0, failJobBatchDelay: 0 });
  const taskList = { noop: async (p) => { runs[p.i]++; if (++done === total) finish(); } };
  const t0 = now();
  const started = [];
  for (let k = 0; k < runners; k++) started.push(await run({ preset: { worker }, noHandleSignals: true, taskList }));
  await allDone;
  const ms = now() - t0;
  for (const r of started) await r.stop();
  const wrong = runs.filter((n) => n !== 1).length;
  console.log(`W5 graphile-worker concurrentJobs=${concurrentJobs} localQueue=${localQueue} runners=${runners}: ` +
    `${Math.round(total / (ms / 1000))} jobs/s (${wrong} jobs not run exactly once)`);
  await utils.release();
}

async function w3() {
  const total = 100000, batch = 1000, loops = 2;
  const pool = new Pool({ connectionString: cs });
  await pool.query("DROP SCHEMA IF EXISTS graphile_worker CASCADE");
  await pool.end();
  const utils = await makeWorkerUtils({ connectionString: cs, maxPoolSize: loops });
  await utils.migrate();
  let next = 0;
  const t0 = now();
  await Promise.all(Array.from({ length: loops }, async () => {
    for (let from = next; from < total; from = next) {
      next += batch;
      const jobs = [];
      for (let i = from; i < from + batch; i++) jobs.push({ identifier: "noop", payload: { i } });
      await utils.addJobs(jobs);
    }
  }));
  const ms = now() - t0;
  const { rows } = await utils.withPgClient((c) => c.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs"));
  console.log(`W3 graphile-worker addJobs, batches of ${batch}, ${loops} loops: ${Math.round(total / (ms / 1000))} jobs/s (${rows[0].n} rows, want ${total})`);
  await utils.release();
}

async function w6() {
  const utils = await freshSchema();
  const total = 2000, warm = 40, rate = 200;
  const begin = new Float64Array(total + warm), started = new Float64Array(total + warm);
  let done = 0;
  let warmed, finish;
  const warmDone = new Promise((resolve) => (warmed = resolve));
  const allDone = new Promise((resolve) => (finish = resolve));
  const runner = await run({ preset: { worker: { connectionString: cs } }, noHandleSignals: true,
    taskList: { noop: async (p) => {
      started[p.i] = now();
      if (++done === warm) warmed();
      if (done === total + warm) finish();
    } } });
  for (let i = 0; i < warm; i++) await utils.addJob("noop", { i });
  await warmDone;
  const t0 = now();
  const calls = [];
  for (let k = 0; k < total; k++) {
    const wait = t0 + (k * 1000) / rate - now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const i = warm + k;
    begin[i] = now();
    calls.push(utils.addJob("noop", { i }));
  }
  await Promise.all(calls);
  await allDone;
  await runner.stop();
  const lat = [];
  for (let i = warm; i < total + warm; i++) lat.push(started[i] - begin[i]);
  console.log(`W6 graphile-worker defaults: p50/p95/p99 ${pct(lat, 0.5).toFixed(2)} / ${pct(lat, 0.95).toFixed(2)} / ${pct(lat, 0.99).toFixed(2)} ms`);
  await utils.release();
}

// The session that pins the horizon: a REPEATABLE READ transaction that has read the
// jobs table (so its snapshot is taken) and holds an xid, then stays idle.
async function pinHorizon() {
  const client = new Client({ connectionString: cs });
  await client.connect();
  await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
  await client.query("SELECT 1 FROM graphile_worker._private_jobs LIMIT 1");
  const { rows } = await client.query("SELECT txid_current() AS xid");
  return { client, xid: rows[0].xid };
}

async function w10(scale) {
  const rate = 800, warm = 40, baseW = 3, pinW = 60, recW = 9, windows = baseW + pinW + recW;
  const win = Math.max(10000 * scale, 100); // window, ms
  const total = Math.round((rate * windows * win) / 1000);
  const utils = await freshSchema();
  // The application's addJob calls go through a pool of 40 connections, as skiplock's W10
  // enqueues through one (graphile-worker's utils default to 10).
  const appPool = new Pool({ connectionString: cs, max: 40 });
  const app = await makeWorkerUtils({ pgPool: appPool });
  const n = total + warm; // warm-up jobs are 0 … warm-1
  const begin = new Float64Array(n), enqueued = new Float64Array(n), started = new Float64Array(n);
  const runs = new Uint8Array(n);
  let done = 0;
  let warmed, finish;
  const warmDone = new Promise((resolve) => (warmed = resolve));
  const allDone = new Promise((resolve) => (finish = resolve));
  // Only warnings and errors are logged (quietLogger): the default logger's line per job
  // would bury the windows' lines (and cost this process 800 console writes a second).
  const runner = await run({ preset: { worker: { connectionString: cs, concurrentJobs: 100, logger: quietLogger } }, noHandleSignals: true,
    taskList: { noop: async (p) => {
      const t = now();
      if (runs[p.i]++ > 0) return;
      started[p.i] = t;
      if (++done === warm) warmed();
      if (done === n) finish();
    } } });
  await Promise.all(Array.from({ length: warm }, (_, i) => app.addJob("noop", { i }))); // opens the pool's connections
  await warmDone;
  const observer = new Client({ connectionString: cs });
  await observer.connect();
  const deadTuples = async () => {
    const { rows } = await observer.query(
      "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'graphile_worker' AND relname = '_private_jobs'");
    return Number(rows[0]?.n_dead_tup ?? 0);
  };

  const t0 = now();
  // The observer reads n_dead_tup at every window's end, takes the pin at the end of
  // the baseline and releases it at the end of the pin windows.
  const dead = new Array(windows).fill(0);
  let pin = null, pinXid = "", pinDead = 0, obsErr = null;
  const observed = (async () => {
    for (let k = 0; k < windows; k++) {
      await sleepUntil(t0 + (k + 1) * win);
      dead[k] = await deadTuples();
      if (k === baseW - 1) {
        pin = await pinHorizon();
        pinXid = pin.xid;
      } else if (k === baseW + pinW - 1) {
        pinDead = dead[k];
        await pin.client.query("ROLLBACK");
        await pin.client.end();
        pin = null;
      }
    }
  })().catch((e) => (obsErr = e));

  // Open loop: every tick starts each job that has fallen due, without waiting for the
  // earlier calls.
  const calls = [];
  let failed = 0, firstErr;
  let launched = 0;
  await new Promise((resolve) => {
    const tick = setInterval(() => {
      const due = Math.min(Math.floor(((now() - t0) * rate) / 1000) + 1, total);
      for (; launched < due; launched++) {
        const i = warm + launched;
        begin[i] = now();
        calls.push(app.addJob("noop", { i }).then(
          () => (enqueued[i] = now()),
          (e) => { failed++; firstErr ??= e; }));
      }
      if (launched === total || obsErr) {
        clearInterval(tick);
        resolve();
      }
    }, 5);
  });
  await Promise.all(calls);
  await observed;
  if (obsErr) throw new Error(`W10: observer: ${obsErr.message ?? obsErr}`);
  if (failed > 0) throw new Error(`W10: ${failed} addJob calls failed, the first: ${firstErr.message ?? firstErr}`);
  let timer;
  const drained = await Promise.race([allDone.then(() => true),
    new Promise((resolve) => (timer = setTimeout(() => resolve(false), 2 * 60 * 1000)))]);
  clearTimeout(timer);
  if (!drained) throw new Error(`W10: ${done - warm} of ${total} jobs started within 2 min of the last enqueue`);
  await runner.stop();
  await observer.end();

  const phase = (k) => (k < baseW ? "baseline" : k < baseW + pinW ? "pin" : "recovery");
  const inWindow = (t) => Math.min(Math.max(Math.floor((t - t0) / win), 0), windows - 1);
  const pickup = [], enq = [], queue = [], completed = new Array(windows).fill(0);
  for (let k = 0; k < windows; k++) pickup.push([]), enq.push([]), queue.push([]);
  for (let i = warm; i < n; i++) {
    const k = inWindow(begin[i]);
    pickup[k].push(started[i] - begin[i]);
    enq[k].push(enqueued[i] - begin[i]);
    queue[k].push(Math.max(started[i] - enqueued[i], 0));
    const c = Math.floor((started[i] - t0) / win);
    if (c < windows) completed[c]++;
  }
  const secs = win / 1000;
  const ms = (xs, p) => (xs.length ? pct(xs, p).toFixed(2) : "-");
  const ws = [];
  for (let k = 0; k < windows; k++) {
    const w = { phase: phase(k), offered: pickup[k].length / secs, completed: completed[k] / secs,
      p99: pickup[k].length ? pct(pickup[k], 0.99) : 0, queueP99: queue[k].length ? pct(queue[k], 0.99) : 0 };
    ws.push(w);
    console.log(`w${String(k).padStart(2, "0")} ${w.phase.padEnd(8)} offered ${Math.round(w.offered)}/s ` +
      `completed ${Math.round(w.completed)}/s  p50 ${ms(pickup[k], 0.5)}  p99 ${ms(pickup[k], 0.99)}  ` +
      `enqueue p99 ${ms(enq[k], 0.99)}  queue p99 ${ms(queue[k], 0.99)} ms  dead ${dead[k]}`);
  }

  const p99s = (name, key = "p99") => ws.filter((w) => w.phase === name).map((w) => w[key]);
  const base = median(p99s("baseline")), pinP99 = p99s("pin");
  const baseQueue = median(p99s("baseline", "queueP99"));
  const queueOver = p99s("pin", "queueP99").filter((p) => p > 2 * baseQueue).length;
  const pinMax = Math.max(...pinP99);
  const over = pinP99.filter((p) => p > 2 * base).length;
  const slow = [];
  ws.forEach((w, k) => { if (k > 0 && w.completed < 0.95 * w.offered) slow.push(`w${String(k).padStart(2, "0")}`); });
  const wrong = runs.filter((r) => r !== 1).length;
  console.log(`W10 graphile-worker concurrentJobs=100, otherwise defaults; ${total} jobs at ${rate}/s, windows of ${secs} s`);
  console.log(`  baseline p99 ${base.toFixed(2)} ms (median of ${baseW} windows)`);
  console.log(`  pin p99 median ${median(pinP99).toFixed(2)} ms, max ${pinMax.toFixed(2)} ms = ${(pinMax / base).toFixed(2)}× baseline; ` +
    `${over} of ${pinW} pin windows above 2× baseline`);
  console.log(`  queue's own part (addJob returned → handler): baseline p99 ${baseQueue.toFixed(2)} ms; ` +
    `${queueOver} of ${pinW} pin windows above 2× it`);
  console.log(`  recovery p99 median ${median(p99s("recovery")).toFixed(2)} ms`);
  console.log(`  windows after the first completing below 95% of offered: ${slow.length}${slow.length ? ` (${slow.slice(0, 10).join(", ")}${slow.length > 10 ? ", …" : ""})` : ""}`);
  console.log(`  jobs not run exactly once: ${wrong}`);
  console.log(`  pin: xid ${pinXid}; ${pinDead} dead job tuples at release`);
  console.log(`W10 ${over === 0 && slow.length === 0 ? "met" : "missed"}`);
  await app.release();
  await appPool.end();
  await utils.release();
}

(async () => {
  const usage = (why) => {
    console.error(`${why}\nusage: URL=postgres://… node bench.js w3 | w5 [concurrentJobs] [localQueue] [runners] | w6 | w10 [scale]`);
    process.exit(2);
  };
  if (!cs) usage("set URL to a throwaway database's connection string");
  const [mode, ...args] = process.argv.slice(2);
  if (mode === "w10" && args[0] !== undefined && !(+args[0] > 0)) usage(`w10: scale ${args[0]}: want a positive number`);
  if (mode === "w3") await w3();
  else if (mode === "w5") await w5(+args[0] || 100, +(args[1] ?? 1000), +args[2] || 2);
  else if (mode === "w6") await w6();
  else if (mode === "w10") await w10(args[0] === undefined ? 1 : +args[0]);
  else usage(`unknown workload ${JSON.stringify(mode ?? "")} (w3, w5, w6 or w10)`);
})().catch((e) => { console.error(e instanceof Error ? e.message : e); process.exit(1); });
