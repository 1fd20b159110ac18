"""The conformance suite's runner for the Python client (package conformance, docs/conformance.md).

Works jobs of kind "conformance" from SKIPLOCK_CONFORMANCE_QUEUE with skiplock.Worker, one at
a time, doing what each job's args say; writes {"event": "started", ...} lines to stdout and
reads {"release": id} lines from stdin. SIGTERM stops it gracefully.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

from psycopg import sql

from skiplock import Cancel, Job, Permanent, Retry, Snooze, Worker

SCHEMA = os.environ["SKIPLOCK_CONFORMANCE_SCHEMA"]
_lock = threading.Lock()
_releases: dict[str, threading.Event] = {}


def release_of(job_id: str) -> threading.Event:
    with _lock:
        return _releases.setdefault(job_id, threading.Event())


def read_releases() -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and msg.get("release"):
            release_of(msg["release"]).set()


def started(job: Job) -> None:
    with _lock:
        sys.stdout.write(json.dumps({"event": "started", "id": job.id, "attempt": job.attempt}) + "\n")
        sys.stdout.flush()


def handle(job: Job) -> Any:
    args = job.args
    started(job)
    if job.attempt <= args.get("block_attempts", 0):
        release_of(job.id).wait()
    action = args["action"]
    if args.get("succeed_from_attempt") and job.attempt >= args["succeed_from_attempt"]:
        action = "complete"
    if action == "complete":
        return args.get("output")
    if action == "fail":
        raise Retry(args["error"])
    if action == "permanent":
        raise Permanent(args["error"])
    if action == "snooze":
        raise Snooze(args["delay_ms"] / 1000)
    if action == "cancel":
        raise Cancel(args["error"])
    if action == "complete_tx":
        with job.conn.transaction():
            job.conn.execute(sql.SQL("INSERT INTO {}.conformance_effects VALUES (%s, %s)").format(sql.Identifier(SCHEMA)),
                             (job.id, job.attempt))
            job.complete_tx(args.get("output"))
        return None
    raise Permanent(f"unknown action {action!r}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    threading.Thread(target=read_releases, daemon=True).start()
    Worker(os.environ["SKIPLOCK_CONFORMANCE_DSN"], {"conformance": handle}, queue=os.environ["SKIPLOCK_CONFORMANCE_QUEUE"],
           schema=SCHEMA, concurrency=1, poll_interval=0.05, reclaim=False).run()


if __name__ == "__main__":
    main()
