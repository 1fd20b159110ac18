// The conformance suite's runner for the Node client (package internal/conformance,
// docs/conformance.md): works jobs of kind "conformance" from SKIPLOCK_CONFORMANCE_QUEUE
// one at a time, doing what each job's args say; writes {"event":"started",…} lines to
// stdout and reads {"release": id} lines from stdin. SIGTERM stops it gracefully.
import { createInterface } from "node:readline";

import { Cancel, Job, Permanent, Retry, Snooze, Worker } from "../src/index";
import { runToExit } from "./exit";

const schema = process.env.SKIPLOCK_CONFORMANCE_SCHEMA!;
const releases = new Map<string, { wait: Promise<void>; open: () => void }>();

function releaseOf(id: string) {
  let r = releases.get(id);
  if (r === undefined) {
    let open: () => void = () => undefined;
    const wait = new Promise<void>((resolve) => (open = resolve));
    r = { wait, open };
    releases.set(id, r);
  }
  return r;
}

createInterface({ input: process.stdin }).on("line", (line) => {
  try {
    const m = JSON.parse(line);
    if (typeof m?.release === "string") releaseOf(m.release).open();
  } catch {
    // not a command
  }
});

async function handle(job: Job): Promise<unknown> {
  const a = job.args;
  process.stdout.write(JSON.stringify({ event: "started", id: job.id, attempt: job.attempt }) + "\n");
  if (job.attempt <= (a.block_attempts ?? 0)) {
    await releaseOf(job.id).wait;
  }
  const action = a.succeed_from_attempt && job.attempt >= a.succeed_from_attempt ? "complete" : a.action;
  switch (action) {
    case "complete":
      return a.output;
    case "fail":
      throw new Retry(a.error);
    case "permanent":
      throw new Permanent(a.error);
    case "snooze":
      throw new Snooze(a.delay_ms / 1000);
    case "cancel":
      throw new Cancel(a.error);
    case "complete_tx":
      await job.transaction(async (tx) => {
        await tx.query(`INSERT INTO "${schema}".conformance_effects VALUES ($1, $2)`, [job.id, job.attempt]);
        await job.completeTx(a.output);
      });
      return undefined;
  }
  throw new Permanent(`unknown action ${JSON.stringify(action)}`);
}

const quiet = { debug() {}, info() {}, warn: (m: string) => console.error(m), error: (m: string) => console.error(m) };
runToExit(new Worker(process.env.SKIPLOCK_CONFORMANCE_DSN!, { conformance: handle }, {
  queue: process.env.SKIPLOCK_CONFORMANCE_QUEUE,
  schema,
  concurrency: 1,
  pollInterval: 0.05,
  reclaim: false,
  logger: quiet,
}));
