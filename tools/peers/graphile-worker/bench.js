// skiplock bench's W5 and W6 shapes, run against graphile-worker, so that its figures
// sit beside skiplock's from the same machine and server (docs/benchmarks.md, "Peers
// measured on this machine"). Not part of skiplock; run by hand:
//
//   npm install
//   URL=postgres://… node bench.js w5 <concurrentJobs> <localQueue size> <runners>
//   URL=postgres://… node bench.js w6
//
// The database must be a throwaway one: each run drops and recreates the
// graphile_worker schema.
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
"use strict";
const { run, makeWorkerUtils } = require("graphile-worker");
const { Pool } = require("pg");

const cs = process.env.URL;
const now = () => Number(process.hrtime.bigint()) / 1e6; // milliseconds
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

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
  const worker = { connectionString: cs, concurrentJobs, maxPoolSize: concurrentJobs + 1 };
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

(async () => {
  if (!cs) throw new Error("set URL to a throwaway database's connection string");
  const [mode, conc, local, runners] = process.argv.slice(2);
  if (mode === "w5") await w5(+conc || 100, +(local ?? 1000), +runners || 2);
  else if (mode === "w6") await w6();
  else throw new Error("usage: node bench.js w5 [concurrentJobs] [localQueue] [runners] | w6");
})().catch((e) => { console.error(e instanceof Error ? e.message : e); process.exit(1); });
