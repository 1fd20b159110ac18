"""A fenced worker on skiplock's SQL worker protocol (docs/sql_workers.md)."""

from __future__ import annotations

import datetime
import json
import logging
import os
import queue as queues
import secrets
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from ._enqueue import DEFAULT_SCHEMA

log = logging.getLogger("skiplock")

SQLSTATE_LEASE_LOST = "SK409"


class Snooze(Exception):
    """Raise from a handler to run the job again after delay seconds, giving its attempt back."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"snoozed for {delay}s")
        self.delay = delay


class Cancel(Exception):
    """Raise from a handler to cancel the job: it will not run again."""


class Permanent(Exception):
    """Raise from a handler to fail the job now, whatever attempts remain."""


class Retry(Exception):
    """Raise from a handler to retry the job after delay seconds (None: the default backoff).

    Any other exception retries with the default backoff too; Retry sets the delay.
    """

    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


class LeaseLost(Exception):
    """The job's lease was lost (reclaimed, cancelled, or finished elsewhere): nothing was written."""


@dataclass(eq=False)
class Job:
    """A claimed job. The handler receives it; conn is its executor's connection."""

    id: str
    kind: str
    args: Any
    attempt: int
    max_attempts: int
    priority: int
    metadata: dict[str, Any] | None
    tags: list[str] | None
    created_at: datetime.datetime
    lease_token: str
    lease_until: datetime.datetime
    _conn: psycopg.Connection[Any] | None = field(default=None, repr=False)
    _schema: str = field(default=DEFAULT_SCHEMA, repr=False)
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)
    _completed_in_tx: bool = field(default=False, repr=False)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The executor's connection (autocommit), for the handler's business writes.

        Open a transaction with ``with job.conn.transaction():`` and call complete_tx
        inside it for exactly-once effects.
        """
        if self._conn is None:
            raise RuntimeError("skiplock: job.conn is only available while the job's handler runs")
        return self._conn

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat found the lease lost: stop working, nothing will be kept."""
        return self._lost.is_set()

    def complete_tx(self, output: Any = None) -> None:
        """Mark the job succeeded inside job.conn's open transaction (Go's CompleteTx).

        The business writes made in that transaction and the completion commit together
        or not at all. If the lease was lost, raises LeaseLost and leaves the transaction
        aborted, so nothing written in it can commit.
        """
        conn = self.conn
        if conn.info.transaction_status != TransactionStatus.INTRANS:
            raise RuntimeError("skiplock: complete_tx must run inside `with job.conn.transaction():`")
        try:
            conn.execute(
                sql.SQL("SELECT {}.complete_job(%s, %s, %s, abort_if_lost => true)").format(sql.Identifier(self._schema)),
                (self.id, self.lease_token, None if output is None else Jsonb(output)),
            )
        except psycopg.Error as e:
            if e.sqlstate == SQLSTATE_LEASE_LOST:
                raise LeaseLost(f"skiplock: lease lost for job {self.id}; the transaction is aborted") from e
            raise
        self._completed_in_tx = True


Handler = Callable[[Job], Any]


def clean_text(s: str) -> str:
    """What PostgreSQL text can hold: NUL and lone surrogates become U+FFFD (Go's policy;
    the database cuts text over 16 KiB)."""
    if "\x00" in s:
        s = s.replace("\x00", "\ufffd")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)
    return s


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, (Cancel, Permanent, Retry)):
        return clean_text(str(exc))
    return clean_text(f"{type(exc).__name__}: {exc}")


def default_name() -> str:
    """host-pid-random, as the Go client names itself."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """Claims jobs of one queue through the SQL protocol and runs them on threads.

    Each of ``concurrency`` executor threads has its own connection; a claimer, a
    heartbeater (which also reclaims expired leases, unless reclaim is False) and a
    LISTEN connection run beside them. run() blocks until stop(), SIGTERM or SIGINT;
    a stop claims nothing more, gives back the jobs not yet started (their attempt
    returned), waits up to shutdown_timeout for running handlers, and returns.
    """

    def __init__(
        self,
        conninfo: str,
        handlers: Mapping[str, Handler],
        *,
        queue: str = "default",
        concurrency: int = 1,
        name: str | None = None,
        lease: float = 30.0,
        poll_interval: float = 1.0,
        shutdown_timeout: float = 30.0,
        reclaim: bool = True,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        if not handlers:
            raise ValueError("skiplock: handlers must map at least one kind to a handler")
        for kind, h in handlers.items():
            if not kind or not callable(h):
                raise ValueError(f"skiplock: handler for kind {kind!r} must be a callable")
        if concurrency < 1 or concurrency > 1000:
            raise ValueError(f"skiplock: concurrency {concurrency} is outside 1..1000")
        if lease < 1:
            raise ValueError(f"skiplock: lease {lease}s is below 1s")
        if poll_interval <= 0 or shutdown_timeout < 0:
            raise ValueError("skiplock: poll_interval must be positive and shutdown_timeout not negative")
        self.conninfo = conninfo
        self.handlers = dict(handlers)
        self.queue = queue
        self.concurrency = concurrency
        self.name = name or default_name()
        self.lease = lease
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.reclaim = reclaim
        self.schema = schema
        self._s = sql.Identifier(schema)
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._busy = 0  # claimed and not yet finished
        self._running: dict[str, Job] = {}
        self._jobs: queues.Queue[Job | None] = queues.Queue()

    # -- lifecycle -------------------------------------------------------------

    def stop(self) -> None:
        """Ask run() to stop gracefully; safe from any thread or a signal handler."""
        self._stopping.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()

    def run(self) -> None:
        """Work jobs until stop(), SIGTERM or SIGINT."""
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: FrameType | None) -> None:
                log.info("skiplock: %s received: stopping", signal.Signals(signum).name)
                self.stop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        claim_conn = self._connect()
        executors = [threading.Thread(target=self._execute, name=f"skiplock-exec-{i}", daemon=True)
                     for i in range(self.concurrency)]
        beat_stop = threading.Event()
        background = [threading.Thread(target=self._heartbeat, args=(beat_stop,), name="skiplock-heartbeat", daemon=True),
                      threading.Thread(target=self._listen, name="skiplock-listen", daemon=True)]
        try:
            for t in executors + background:
                t.start()
            log.info("skiplock: worker %s working queue %s (%d at once)", self.name, self.queue, self.concurrency)
            claim_conn = self._claim_loop(claim_conn)
        finally:
            self._stopping.set()
            for _ in executors:
                self._jobs.put(None)
            deadline = time.monotonic() + self.shutdown_timeout
            for t in executors:
                t.join(max(0.0, deadline - time.monotonic()))
            still = [j.id for j in list(self._running.values())]
            if still:
                log.warning("skiplock: stopped with %d job(s) still running (%s); their leases will expire and they run again",
                            len(still), ", ".join(still))
            beat_stop.set()
            for t in background:
                t.join(2 * self.poll_interval + 1)
            claim_conn.close()
            for sig, h in previous.items():
                signal.signal(sig, h)
            log.info("skiplock: worker %s stopped", self.name)

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.conninfo, autocommit=True, application_name=f"skiplock python worker {self.name}"[:63])

    def _reconnect(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        try:
            conn.close()
        except psycopg.Error:
            pass
        backoff = 0.1
        while True:
            try:
                return self._connect()
            except psycopg.Error as e:
                log.warning("skiplock: connecting failed (retrying in %.1fs): %s", backoff, e)
                time.sleep(backoff)  # a pause before reconnecting, not synchronisation
                backoff = min(backoff * 2, 5.0)

    # -- claiming ----------------------------------------------------------------

    def _claim_loop(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        backoff = 0.1
        kinds = sorted(self.handlers)
        while not self._stopping.is_set():
            with self._cond:
                while self._busy >= self.concurrency and not self._stopping.is_set():
                    self._cond.wait()
                free = self.concurrency - self._busy
            if self._stopping.is_set():
                break
            self._wake.clear()
            try:
                rows = conn.execute(
                    sql.SQL("SELECT id::text, kind, args, attempt, max_attempts, priority, metadata, tags, created_at, "
                            "lease_token::text, lease_until FROM {}.claim_jobs(%s, %s, n => %s, lease => %s, kinds => %s)")
                    .format(self._s),
                    (self.queue, self.name, free, datetime.timedelta(seconds=self.lease), kinds),
                ).fetchall()
                backoff = 0.1
            except psycopg.Error as e:
                if e.sqlstate is None or conn.closed or conn.broken:
                    log.warning("skiplock: claiming from %s failed (reconnecting): %s", self.queue, e)
                    conn = self._reconnect(conn)
                else:
                    log.error("skiplock: claiming from %s refused: %s", self.queue, e)
                    backoff = max(backoff, self.poll_interval)
                self._wake.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            if not rows:
                self._wake.wait(self.poll_interval)
                continue
            jobs = [Job(id=r[0], kind=r[1], args=r[2], attempt=r[3], max_attempts=r[4], priority=r[5],
                        metadata=r[6], tags=r[7], created_at=r[8], lease_token=r[9], lease_until=r[10],
                        _schema=self.schema) for r in rows]
            with self._cond:
                self._busy += len(jobs)
                for j in jobs:
                    self._running[j.id] = j
            for j in jobs:
                self._jobs.put(j)
        return conn

    def _listen(self) -> None:
        """Wakes the claimer when a job is enqueued into the queue (NOTIFY at commit)."""
        channel = f"{self.schema}.jobs"[:63]
        conn: psycopg.Connection[Any] | None = None
        while not self._stopping.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                ready, _, _ = select.select([conn.fileno()], [], [], self.poll_interval)
                if ready:
                    conn.pgconn.consume_input()
                    while (n := conn.pgconn.notifies()) is not None:
                        if n.extra.decode() == self.queue:
                            self._wake.set()
            except (psycopg.Error, OSError) as e:
                log.debug("skiplock: the LISTEN connection failed (polling meanwhile): %s", e)
                if conn is not None:
                    conn.close()
                conn = None
                self._stopping.wait(self.poll_interval)
        if conn is not None:
            conn.close()

    # -- heartbeats and reclaiming -------------------------------------------------

    def _heartbeat(self, stop: threading.Event) -> None:
        conn: psycopg.Connection[Any] | None = None
        lease = datetime.timedelta(seconds=self.lease)
        last_reclaim = 0.0
        while not stop.wait(self.lease / 3):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                with self._cond:
                    held = list(self._running.values())
                for job in held:
                    if job._lost.is_set():
                        continue
                    row = conn.execute(sql.SQL("SELECT {}.heartbeat_job(%s, %s, %s)").format(self._s),
                                       (job.id, job.lease_token, lease)).fetchone()
                    if row is not None and row[0] == "lost":
                        job._lost.set()
                        log.warning("skiplock: lease lost for job %s (%s): its outcome will not be kept", job.id, job.kind)
                if self.reclaim and time.monotonic() - last_reclaim >= self.lease:
                    last_reclaim = time.monotonic()
                    row = conn.execute(sql.SQL("SELECT {}.reclaim_jobs(%s)").format(self._s), (self.queue,)).fetchone()
                    if row is not None and row[0]:
                        log.info("skiplock: reclaimed %d job(s) of queue %s whose lease had expired", row[0], self.queue)
            except psycopg.Error as e:
                log.warning("skiplock: heartbeat failed (retrying): %s", e)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    # -- executing -----------------------------------------------------------------

    def _execute(self) -> None:
        conn = self._connect()
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                try:
                    if self._stopping.is_set():
                        # Claimed but not started: back to the queue, its attempt returned.
                        conn = self._finish(conn, job, "snooze_job", "%s", (datetime.timedelta(0),))
                    else:
                        conn = self._run(conn, job)
                finally:
                    with self._cond:
                        self._busy -= 1
                        self._running.pop(job.id, None)
                        self._cond.notify_all()
        finally:
            conn.close()

    def _run(self, conn: psycopg.Connection[Any], job: Job) -> psycopg.Connection[Any]:
        handler = self.handlers.get(job.kind)
        job._conn = conn
        try:
            if handler is None:
                raise Permanent(f"no handler registered for kind {job.kind!r}")
            result = handler(job)
        except Snooze as s:
            return self._finish(conn, job, "snooze_job", "%s", (datetime.timedelta(seconds=max(0.0, s.delay)),))
        except Cancel as c:
            return self._finish(conn, job, "cancel_job", "%s", (_error_text(c),))
        except Permanent as p:
            return self._finish(conn, job, "fail_job", "%s, permanent => true", (_error_text(p),))
        except LeaseLost as e:
            log.warning("skiplock: job %s (%s): %s", job.id, job.kind, e)
            return self._reset(conn)
        except Exception as e:  # noqa: BLE001 — any handler error is a retry
            log.info("skiplock: job %s (%s) attempt %d failed: %s", job.id, job.kind, job.attempt, _error_text(e))
            delay = e.delay if isinstance(e, Retry) else None
            return self._finish(conn, job, "fail_job", "%s, delay => %s",
                                (_error_text(e), None if delay is None else datetime.timedelta(seconds=max(0.0, delay))))
        finally:
            job._conn = None
        try:
            try:
                output = None if result is None else json.dumps(result, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise _OutputRefused(f"not JSON: {e}") from e
            return self._finish(conn, job, "complete_job", "%s::jsonb", (output,))
        except _OutputRefused as e:
            return self._finish(conn, job, "fail_job", "%s", (clean_text(f"the handler's output was refused: {e}"),))

    def _reset(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        """Leaves conn idle after a handler (which may have left a transaction open)."""
        if conn.closed or conn.broken:
            return self._reconnect(conn)
        if conn.info.transaction_status != TransactionStatus.IDLE:
            log.warning("skiplock: a handler left a transaction open on job.conn; rolling it back")
            conn.rollback()
        return conn

    def _finish(self, conn: psycopg.Connection[Any], job: Job, fn: str, args: str,
                params: tuple[Any, ...]) -> psycopg.Connection[Any]:
        """Records one outcome, fenced by the job's token; retried on connection errors
        until the lease would have run out (a retry after a lost reply says lost)."""
        conn = self._reset(conn)
        query = sql.SQL("SELECT {}.{}(%s, %s, " + args + ")").format(self._s, sql.Identifier(fn))
        deadline = time.monotonic() + self.lease
        backoff = 0.1
        while True:
            try:
                row = conn.execute(query, (job.id, job.lease_token, *params)).fetchone()
                status = row[0] if row else "lost"
                break
            except psycopg.errors.InvalidParameterValue as e:
                if fn == "complete_job" and e.diag.column_name == "output":
                    raise _OutputRefused(str(e)) from e
                log.error("skiplock: job %s: %s refused: %s", job.id, fn, e)
                return conn
            except psycopg.Error as e:
                if time.monotonic() > deadline:
                    log.error("skiplock: job %s: recording its outcome failed for a whole lease; it will run again: %s", job.id, e)
                    return self._reconnect(conn)
                log.warning("skiplock: job %s: recording its outcome failed (retrying): %s", job.id, e)
                time.sleep(backoff)  # a pause before retrying, not synchronisation
                backoff = min(backoff * 2, 2.0)
                conn = self._reconnect(conn)
        if status == "lost":
            if not job._completed_in_tx:
                log.warning("skiplock: job %s (%s): lease lost; its outcome was not recorded", job.id, job.kind)
        else:
            log.debug("skiplock: job %s (%s) is %s", job.id, job.kind, status)
        return conn


class _OutputRefused(Exception):
    pass
