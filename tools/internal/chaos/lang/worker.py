"""A chaos worker process on the Python client (clients/python), for the lang-sigkill
scenario (tools/internal/chaos/lang.go).

Works the harness's "chaos" jobs of the default queue with skiplock.Worker: each job
sleeps its "ms", fails its first attempt when "fail_first" says so, and writes its
effect, an audit row carrying the lease token it ran under. Half the jobs (by id) write
the effect ("effect_tx") and complete in one transaction (job.complete_tx) and record what that
completion said: "ack_succeeded", or "manual_lease_lost" when the lease was gone and
nothing was written. The others return and let the worker record the outcome.

Configured by the environment: SKIPLOCK_CHAOS_DSN, SKIPLOCK_CHAOS_SCHEMA,
SKIPLOCK_CHAOS_ID, SKIPLOCK_CHAOS_LEASE (seconds), SKIPLOCK_CHAOS_CONCURRENCY. Prints
"ready" on stdout once its worker is built; SIGTERM stops it gracefully.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

from skiplock import Job, LeaseLost, Worker

DSN = os.environ["SKIPLOCK_CHAOS_DSN"]
SCHEMA = os.environ["SKIPLOCK_CHAOS_SCHEMA"]
ID = os.environ["SKIPLOCK_CHAOS_ID"]
AUDIT = sql.SQL("INSERT INTO {}.chaos_audit (job_id, worker, lease_token, event) VALUES (%s, %s, %s, %s)").format(
    sql.Identifier(SCHEMA))


def audit(job: Job, event: str) -> None:
    """One audit row, on a connection of its own (autocommit)."""
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(AUDIT, (job.id, ID, job.lease_token, event))


def handle(job: Job) -> Any:
    args = job.args
    time.sleep(args.get("ms", 0) / 1000)  # the work; a SIGKILL lands here
    if args.get("fail_first") and job.attempt == 1:
        raise RuntimeError("chaos: the first attempt fails on purpose")
    if int(job.id[-1], 16) % 2 == 0:
        try:
            with job.conn.transaction():
                job.conn.execute(AUDIT, (job.id, ID, job.lease_token, "effect_tx"))
                job.complete_tx()
        except LeaseLost:
            audit(job, "manual_lease_lost")
            raise
        audit(job, "ack_succeeded")
        return None
    audit(job, "effect")
    return None


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    w = Worker(DSN, {"chaos": handle}, queue="default", schema=SCHEMA, name=ID,
               concurrency=int(os.environ.get("SKIPLOCK_CHAOS_CONCURRENCY", "4")),
               lease=float(os.environ["SKIPLOCK_CHAOS_LEASE"]), poll_interval=0.2, shutdown_timeout=3)
    print("ready", flush=True)
    w.run()


if __name__ == "__main__":
    main()
