// The test programs' ending: run the worker until it stops (SIGTERM), then exit 0; exit
// 1 with the error if it failed.
import type { Worker } from "../src/index";

export function runToExit(w: Worker): void {
  w.run().then(
    () => process.exit(0),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}
