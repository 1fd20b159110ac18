// A chaos worker process on the Node client (clients/node, built: dist/src), for the
// lang-sigkill scenario (tools/internal/chaos/lang.go).
//
// Works the harness's "chaos" jobs of the default queue: each job sleeps its "ms",
// fails its first attempt when "fail_first" says so, and writes its effect, an audit
// row carrying the lease token it ran under; what the worker then reports for each
// outcome is recorded too ("ack_succeeded", "ack_lease_lost"…), so the harness can
// check that no success it acknowledged is missing and no refused one was written.
//
// Usage: node worker.mjs <clients/node directory>; configured by the environment as
// worker.py is. Prints "ready" once its worker is built; SIGTERM stops it gracefully.
import { createRequire } from "node:module";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { pathToFileURL } from "node:url";

const { Worker, quoteIdent } = await import(pathToFileURL(path.join(process.argv[2], "dist", "src", "index.js")).href);
const pg = createRequire(path.join(process.argv[2], "package.json"))("pg");
const env = process.env;
const id = env.SKIPLOCK_CHAOS_ID;
const audit = `INSERT INTO ${quoteIdent(env.SKIPLOCK_CHAOS_SCHEMA)}.chaos_audit (job_id, worker, lease_token, event) VALUES ($1, $2, $3, $4)`;
const auditPool = new pg.Pool({ connectionString: env.SKIPLOCK_CHAOS_DSN, max: 2 });
auditPool.on("error", () => undefined);
const quiet = { debug() {}, info() {}, warn: (m) => console.error(m), error: (m) => console.error(m) };

const w = new Worker(
  env.SKIPLOCK_CHAOS_DSN,
  {
    chaos: async (job) => {
      await sleep(job.args.ms ?? 0); // the work; a SIGKILL lands here
      if (job.args.fail_first && job.attempt === 1) {
        throw new Error("chaos: the first attempt fails on purpose");
      }
      await job.client.query(audit, [job.id, id, job.leaseToken, "effect"]);
      return null;
    },
  },
  {
    schema: env.SKIPLOCK_CHAOS_SCHEMA,
    name: id,
    concurrency: Number(env.SKIPLOCK_CHAOS_CONCURRENCY ?? 4),
    lease: Number(env.SKIPLOCK_CHAOS_LEASE),
    pollInterval: 0.2,
    shutdownTimeout: 3,
    logger: quiet,
    onOutcome: (job, status) => {
      // What the worker was told about its write: recorded after the fact, best effort
      // (a missing row weakens no check, it only removes evidence).
      auditPool.query(audit, [job.id, id, job.leaseToken, status === "lost" ? "ack_lease_lost" : `ack_${status}`]).catch(() => undefined);
    },
  },
);
console.log("ready");
w.run().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
