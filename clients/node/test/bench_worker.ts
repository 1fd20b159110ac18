// The Node worker `skiplock bench` W13 measures (cmd/skiplock/internal/bench/w11.go):
// works the "noop" jobs of the default queue of SKIPLOCK_BENCH_SCHEMA at
// SKIPLOCK_BENCH_CONCURRENCY until SIGTERM.
import { Worker } from "../src/index";
import { runToExit } from "./exit";

const quiet = { debug() {}, info() {}, warn: (m: string) => console.error(m), error: (m: string) => console.error(m) };
runToExit(new Worker(process.env.SKIPLOCK_BENCH_DSN!, { noop: () => undefined }, {
  schema: process.env.SKIPLOCK_BENCH_SCHEMA,
  concurrency: Number(process.env.SKIPLOCK_BENCH_CONCURRENCY ?? "16"),
  pollInterval: 0.05,
  logger: quiet,
}));
