// A chaos worker process on the HTTP worker gateway (gateway/, docs/gateway.md), for
// the lang-sigkill scenario (tools/internal/chaos/lang.go): the gateway runs in the
// harness's process, this worker only speaks HTTP to it (and writes its audit rows).
//
// Works the harness's "chaos" jobs of the default queue: SKIPLOCK_CHAOS_CONCURRENCY
// loops each claim one job (a long poll), renew its lease every third of it while it
// works, sleep its "ms", fail its first attempt when "fail_first" says so (POST
// /v1/jobs/{id}/fail), else write the effect (an audit row carrying the lease token it
// ran under) and complete it (POST /v1/jobs/{id}/complete), recording what the gateway
// answered: "ack_succeeded", or "ack_lease_lost" for a 409 lease_lost.
//
// Usage: node gateway_worker.mjs <clients/node directory> (for its pg); configured by
// SKIPLOCK_CHAOS_GATEWAY (the gateway's base URL), SKIPLOCK_CHAOS_DSN (the audit's
// connection), SKIPLOCK_CHAOS_SCHEMA, SKIPLOCK_CHAOS_ID and SKIPLOCK_CHAOS_CONCURRENCY.
// Prints "ready" once the gateway answered; SIGTERM stops it (claimed jobs' leases expire).
import { createRequire } from "node:module";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

const pg = createRequire(path.join(process.argv[2], "package.json"))("pg");
const env = process.env;
const base = env.SKIPLOCK_CHAOS_GATEWAY;
const id = env.SKIPLOCK_CHAOS_ID;
const schema = '"' + env.SKIPLOCK_CHAOS_SCHEMA.replaceAll('"', '""') + '"';
const audit = `INSERT INTO ${schema}.chaos_audit (job_id, worker, lease_token, event) VALUES ($1, $2, $3, $4)`;
const db = new pg.Pool({ connectionString: env.SKIPLOCK_CHAOS_DSN, max: 2 });
db.on("error", () => undefined);
let stopping = false;
process.on("SIGTERM", () => {
  stopping = true;
});

async function call(route, body) {
  const res = await fetch(base + route, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10000), // the claim's long poll is 1 s
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : JSON.parse(text) };
}

async function work(job) {
  const token = job.lease_token;
  const every = Math.max(100, Math.floor(job.lease_ms / 3));
  const beat = setInterval(() => void call(`/v1/jobs/${job.id}/heartbeat`, { lease_token: token }).catch(() => undefined), every);
  try {
    await sleep(job.args.ms ?? 0); // the work; a SIGKILL lands here
    if (job.args.fail_first && job.attempt === 1) {
      await call(`/v1/jobs/${job.id}/fail`, { lease_token: token, error: "chaos: the first attempt fails on purpose" });
      return;
    }
    await db.query(audit, [job.id, id, token, "effect"]);
  } finally {
    clearInterval(beat);
  }
  const r = await call(`/v1/jobs/${job.id}/complete`, { lease_token: token });
  const event = r.status === 200 ? "ack_succeeded" : r.status === 409 ? "ack_lease_lost" : null;
  if (event === null) {
    console.error(`complete ${job.id}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    return;
  }
  // What the worker was told about its write, best effort (as worker.mjs records it).
  await db.query(audit, [job.id, id, token, event]).catch(() => undefined);
}

async function loop() {
  while (!stopping) {
    try {
      const r = await call("/v1/claim", { queue: "default", limit: 1, wait_ms: 1000 });
      if (r.status !== 200) {
        console.error(`claim: HTTP ${r.status} ${JSON.stringify(r.body)}`);
        await sleep(200); // a pause before claiming again
        continue;
      }
      for (const job of r.body.jobs) {
        await work({ ...job, lease_ms: r.body.lease_ms });
      }
    } catch (e) {
      console.error(`gateway worker: ${e.message}`);
      await sleep(200); // a pause before claiming again
    }
  }
}

// Ready once the gateway answers (its OpenAPI document).
for (;;) {
  try {
    if ((await fetch(base + "/openapi.json", { signal: AbortSignal.timeout(1000) })).ok) break;
  } catch {
    // not listening yet, or slow to answer: ask again
  }
  await sleep(50);
}
console.log("ready");
await Promise.all(Array.from({ length: Number(env.SKIPLOCK_CHAOS_CONCURRENCY ?? 4) }, loop));
await db.end();
process.exit(0);
