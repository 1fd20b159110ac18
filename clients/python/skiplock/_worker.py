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

# How many outcomes may wait for the completer before the claimer pauses.
_MAX_HELD = 2000

# The longest the main thread blocks in a wait of its own. Python runs a signal
# handler on the main thread only, and a signal the kernel hands to another thread
# (any thread may take a process's signal) does not wake a main thread blocked on a
# lock: it runs the handler when it next wakes. A bounded wait makes that within this.
_MAIN_WAIT = 0.5

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
    _get_conn: Callable[[], psycopg.Connection[Any]] | None = field(default=None, repr=False)
    _schema: str = field(default=DEFAULT_SCHEMA, repr=False)
    _lost: bool = field(default=False, repr=False)  # a heartbeat found the lease lost
    _completed_in_tx: bool = field(default=False, repr=False)
    _finishing: bool = field(default=False, repr=False)  # its outcome is on the way

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The executor's connection (autocommit), for the handler's business writes.

        Open a transaction with ``with job.conn.transaction():`` and call complete_tx
        inside it for exactly-once effects.
        """
        if self._get_conn is None:
            raise RuntimeError("skiplock: job.conn is only available while the job's handler runs")
        return self._get_conn()

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat found the lease lost: stop working, nothing will be kept."""
        return self._lost

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


@dataclass
class _Outcome:
    """One job's result, as finish_jobs takes it."""

    job: Job
    action: str  # complete, retry, fail, snooze, cancel
    delay: datetime.timedelta | None = None
    error: str | None = None
    output: str | None = None  # JSON text


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


def _retryable(e: psycopg.Error) -> bool:
    """A connection failure, a server shutting down, a serialization failure or a deadlock."""
    return e.sqlstate is None or e.sqlstate.startswith(("08", "57P", "40"))


def default_name() -> str:
    """host-pid-random, as the Go client names itself."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Worker:
    """Claims jobs of one queue through the SQL protocol and runs them on threads.

    ``concurrency`` handlers run at once, each on its own thread. Beside them: a
    claimer, which keeps jobs claimed ahead (as Go's adaptive prefetch: about
    prefetch_window seconds of work by the handlers' average run time, at most
    prefetch; None means the default, 1000) and claims once a quarter of its places
    are free; a completer, which
    records outcomes in batches (one finish_jobs call for all that are ready, as Go's
    completer does); a heartbeater, which also reclaims expired leases unless reclaim
    is False; and a LISTEN connection that wakes the claimer. A handler that uses
    job.conn gets its thread's own connection, opened on first use.

    run() blocks until stop(), SIGTERM or SIGINT; a stop claims nothing more, gives
    back the jobs not yet started (their attempt returned), waits up to
    shutdown_timeout for running handlers, records every outcome, and returns.
    """

    def __init__(
        self,
        conninfo: str,
        handlers: Mapping[str, Handler],
        *,
        queue: str = "default",
        concurrency: int = 1,
        prefetch: int | None = 1000,
        prefetch_window: float = 0.05,
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
        if prefetch is None:
            prefetch = 1000
        if not 0 <= prefetch <= 1000:
            raise ValueError(f"skiplock: prefetch {prefetch} is outside 0..1000")
        if not prefetch_window >= 0:
            raise ValueError(f"skiplock: prefetch_window {prefetch_window}s is negative")
        if lease < 1:
            raise ValueError(f"skiplock: lease {lease}s is below 1s")
        if poll_interval <= 0 or shutdown_timeout < 0:
            raise ValueError("skiplock: poll_interval must be positive and shutdown_timeout not negative")
        self.conninfo = conninfo
        self.handlers = dict(handlers)
        self.queue = queue
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.prefetch_window = prefetch_window
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
        self._busy = 0  # claimed and not yet run (queued or running)
        self._held = 0  # run, outcome not yet durable
        self._claimer_waits = False  # the claimer waits on _cond for places
        self._avg_run = 0.0  # moving average of the handlers' run times in seconds (0: none ran yet)
        self._running: dict[str, Job] = {}  # every claimed job until its outcome is durable, by id
        self._jobs: queues.SimpleQueue[Job | None] = queues.SimpleQueue()
        self._outcomes: queues.SimpleQueue[_Outcome | None] = queues.SimpleQueue()

    # -- lifecycle -------------------------------------------------------------

    def stop(self) -> None:
        """Ask run() to stop gracefully; safe from any thread or a signal handler."""
        self._stopping.set()
        self._wake.set()
        with self._cond:
            self._cond.notify_all()

    def _stop_on_signal(self, signum: int) -> None:
        self.stop()
        log.info("skiplock: %s received: stopping", signal.Signals(signum).name)

    def run(self) -> None:
        """Work jobs until stop(), SIGTERM or SIGINT."""
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: FrameType | None) -> None:
                # A handler runs on the main thread between two of its bytecodes, maybe
                # while that thread holds a lock stop() or the log would take (an
                # Event's, stdout's): it could wait for itself. A thread of its own
                # stops the worker instead.
                threading.Thread(target=self._stop_on_signal, args=(signum,), name="skiplock-signal",
                                 daemon=True).start()
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            claim_conn = self._connect(async_commit=True)
        except BaseException:
            for sig, h in previous.items():
                signal.signal(sig, h)
            raise
        executors = [threading.Thread(target=self._execute, name=f"skiplock-exec-{i}", daemon=True)
                     for i in range(self.concurrency)]
        completer = threading.Thread(target=self._complete, name="skiplock-completer", daemon=True)
        beat_stop = threading.Event()
        background = [threading.Thread(target=self._heartbeat, args=(beat_stop,), name="skiplock-heartbeat", daemon=True),
                      threading.Thread(target=self._listen, name="skiplock-listen", daemon=True)]
        try:
            for t in executors + [completer] + background:
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
            running = [t for t in executors if t.is_alive()]
            self._outcomes.put(None)
            completer.join(self.lease)
            if running:
                with self._cond:
                    still = [j.id for j in self._running.values() if not j._finishing]
                log.warning("skiplock: stopped with %d handler(s) still running (jobs %s); their leases will expire "
                            "and the jobs run again", len(running), ", ".join(still))
            beat_stop.set()
            for t in background:
                t.join(self.poll_interval + 2)
            claim_conn.close()
            for sig, h in previous.items():
                signal.signal(sig, h)
            log.info("skiplock: worker %s stopped", self.name)

    def _connect(self, async_commit: bool = False) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.conninfo, autocommit=True,
                               application_name=f"skiplock python worker {self.name}"[:63])
        if async_commit:
            # Claims and heartbeats need no durability of their own (docs/sql_workers.md,
            # as Go's): a claim lost in a crash leaves the job pending, and outcomes, which
            # commit synchronously on other connections, imply their claim is durable.
            conn.execute("SET synchronous_commit = off")
        return conn

    def _reconnect(self, conn: psycopg.Connection[Any] | None, async_commit: bool = False) -> psycopg.Connection[Any]:
        if conn is not None:
            conn.close()
        backoff = 0.1
        while True:
            try:
                return self._connect(async_commit)
            except psycopg.Error as e:
                log.warning("skiplock: connecting failed (retrying in %.1fs): %s", backoff, e)
                time.sleep(backoff)  # a pause before reconnecting, not synchronisation
                backoff = min(backoff * 2, 5.0)

    def _ran(self, job: Job) -> None:
        """The job's handler is done (or it was given back): its place is free, its
        outcome on the way to the completer."""
        job._finishing = True
        with self._cond:
            self._busy -= 1
            self._held += 1
            if self._claimer_waits:
                self._cond.notify()

    def _release(self, jobs: list[Job]) -> None:
        """The jobs' outcomes are durable (or given up on)."""
        with self._cond:
            self._held -= len(jobs)
            for job in jobs:
                self._running.pop(job.id, None)
            if self._claimer_waits:
                self._cond.notify()

    def _limit(self) -> int:
        """How many jobs to hold (queued or running): the handlers, and as Go's adaptive
        prefetch about prefetch_window of work by the handlers' average run time, at
        most prefetch. Until a handler has run, concurrency jobs ahead (at most prefetch)."""
        if self.prefetch == 0:
            return self.concurrency
        if self._avg_run <= 0:
            return self.concurrency + min(self.concurrency, self.prefetch)
        return self.concurrency + min(int(self.prefetch_window / self._avg_run), self.prefetch)

    # -- claiming ----------------------------------------------------------------

    def _may_claim(self) -> bool:
        """Whether a claim is due (self._cond held): as Go's producer, a place is free and,
        while jobs wait for a handler, a quarter of the places are, so that each round
        trip brings a batch; and the outcomes on their way are within their bound."""
        limit = self._limit()
        free = limit - self._busy
        return free > 0 and self._held < _MAX_HELD and (free >= limit / 4 or self._jobs.empty())

    def _nap(self, timeout: float) -> None:
        """The claimer's wait for a wake-up (a NOTIFY, a freed place, stop()) of at most
        timeout, in slices of _MAIN_WAIT so that a signal's handler is not held up."""
        deadline = time.monotonic() + timeout
        while not self._wake.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(min(left, _MAIN_WAIT))

    def _claim_loop(self, conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        backoff = 0.1
        kinds = sorted(self.handlers)
        # One value for the whole claim, the jobs as JSON: json.loads decodes it many
        # times faster than the driver decodes each column of each row.
        query = sql.SQL("SELECT json_agg(json_build_array(c.id, c.kind, c.args, c.attempt, c.max_attempts, c.priority, "
                        "c.metadata, c.tags, c.created_at, c.lease_token, c.lease_until) ORDER BY c.n)::text "
                        "FROM {}.claim_jobs(%s, %s, n => %s, lease => %s, kinds => %s) WITH ORDINALITY "
                        "AS c(id, kind, args, attempt, max_attempts, priority, run_at, metadata, tags, created_at, "
                        "lease_token, lease_until, n)").format(self._s)
        lease = datetime.timedelta(seconds=self.lease)
        parse_time = datetime.datetime.fromisoformat
        while not self._stopping.is_set():
            with self._cond:
                # Outcomes on their way do not hold places (the completer commits while
                # the handlers go on), up to a bound of their own.
                while not self._stopping.is_set() and not self._may_claim():
                    self._claimer_waits = True
                    self._cond.wait(_MAIN_WAIT)
                self._claimer_waits = False
                free = min(self._limit() - self._busy, 1000)
            if self._stopping.is_set():
                break
            self._wake.clear()
            try:
                text = conn.execute(query, (self.queue, self.name, free, lease, kinds)).fetchone()[0]  # type: ignore[index]
                backoff = 0.1
            except psycopg.Error as e:
                if e.sqlstate is None or conn.closed or conn.broken:
                    log.warning("skiplock: claiming from %s failed (reconnecting): %s", self.queue, e)
                    conn = self._reconnect(conn, async_commit=True)
                else:
                    log.error("skiplock: claiming from %s refused: %s", self.queue, e)
                    backoff = max(backoff, self.poll_interval)
                self._nap(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            if text is None:
                self._nap(self.poll_interval)
                continue
            schema = self.schema
            jobs = [Job(id=r[0], kind=r[1], args=r[2], attempt=r[3], max_attempts=r[4], priority=r[5],
                        metadata=r[6], tags=r[7], created_at=parse_time(r[8]), lease_token=r[9],
                        lease_until=parse_time(r[10]), _schema=schema) for r in json.loads(text)]
            with self._cond:
                self._busy += len(jobs)
                for j in jobs:
                    self._running[j.id] = j
            for j in jobs:
                self._jobs.put(j)
            if len(jobs) < free:
                # The queue is drained for now: wait for a NOTIFY or the poll.
                self._nap(self.poll_interval)
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
        # One round trip for every held job.
        query = sql.SQL("SELECT h.id::text, {}.heartbeat_job(h.id, h.token, %s) "
                        "FROM unnest(%s::uuid[], %s::uuid[]) AS h(id, token)").format(self._s)
        last_reclaim = 0.0
        while not stop.wait(self.lease / 3):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect(async_commit=True)
                with self._cond:
                    held = {j.id: j for j in self._running.values() if not j._lost}
                if held:
                    rows = conn.execute(query, (lease, list(held), [j.lease_token for j in held.values()])).fetchall()
                    for job_id, status in rows:
                        job = held[job_id]
                        # 'lost' for a job whose outcome is on its way (or was written by its
                        # complete_tx) is that outcome landing.
                        if status == "lost" and not job._finishing and not job._completed_in_tx:
                            job._lost = True
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
        holder: list[psycopg.Connection[Any]] = []

        def get_conn() -> psycopg.Connection[Any]:
            if not holder or holder[0].closed or holder[0].broken:
                holder[:] = [self._connect()]
            return holder[0]

        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                if job._lost:
                    # Its lease was lost while it waited (a heartbeat said so): someone
                    # else owns it now, and nothing of it is written.
                    self._ran(job)
                    self._release([job])
                    continue
                if self._stopping.is_set():
                    # Claimed but not started: back to the queue, its attempt returned.
                    out = _Outcome(job, "snooze", delay=datetime.timedelta(0))
                else:
                    t0 = time.perf_counter()
                    out = self._run(job, get_conn)
                    d = max(time.perf_counter() - t0, 1e-6)
                    self._avg_run = d if self._avg_run <= 0 else self._avg_run + (d - self._avg_run) / 8
                    if holder:
                        self._reset(holder)
                self._ran(job)
                self._outcomes.put(out)
        finally:
            if holder:
                holder[0].close()

    def _run(self, job: Job, get_conn: Callable[[], psycopg.Connection[Any]]) -> _Outcome:
        handler = self.handlers.get(job.kind)
        job._get_conn = get_conn
        try:
            if handler is None:
                raise Permanent(f"no handler registered for kind {job.kind!r}")
            result = handler(job)
        except Snooze as s:
            return _Outcome(job, "snooze", delay=datetime.timedelta(seconds=max(0.0, s.delay)))
        except Cancel as c:
            return _Outcome(job, "cancel", error=_error_text(c))
        except Permanent as p:
            return _Outcome(job, "fail", error=_error_text(p))
        except BaseException as e:  # noqa: BLE001 — any other handler error (SystemExit too) is a retry
            if isinstance(e, LeaseLost):
                job._lost = True  # its outcome will be fenced out: said once, here
                log.warning("skiplock: job %s (%s): %s", job.id, job.kind, e)
            else:
                log.info("skiplock: job %s (%s) attempt %d failed: %s", job.id, job.kind, job.attempt, _error_text(e))
            delay = e.delay if isinstance(e, Retry) else None
            return _Outcome(job, "retry", error=_error_text(e),
                            delay=None if delay is None else datetime.timedelta(seconds=max(0.0, delay)))
        finally:
            job._get_conn = None
        try:
            output = None if result is None else json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            return _Outcome(job, "retry", error=clean_text(f"the handler's output was refused: not JSON: {e}"))
        return _Outcome(job, "complete", output=output)

    @staticmethod
    def _reset(holder: list[psycopg.Connection[Any]]) -> None:
        """Leaves the executor's connection idle after a handler (which may have left a
        transaction open), or drops it when broken."""
        conn = holder[0]
        if conn.closed or conn.broken:
            conn.close()
            holder.clear()
        elif conn.info.transaction_status != TransactionStatus.IDLE:
            log.warning("skiplock: a handler left a transaction open on job.conn; rolling it back")
            conn.rollback()

    # -- completing ----------------------------------------------------------------

    def _complete(self) -> None:
        """Records the outcomes in batches: whatever is ready, in one finish_jobs call."""
        conn: psycopg.Connection[Any] | None = None
        done = False
        while not done:
            first = self._outcomes.get()
            batch: list[_Outcome] = []
            if first is None:
                done = True
            else:
                batch.append(first)
            while len(batch) < 1000:
                try:
                    o = self._outcomes.get_nowait()
                except queues.Empty:
                    break
                if o is None:
                    done = True
                else:
                    batch.append(o)
            if batch:
                conn = self._write(conn, batch)
        if conn is not None:
            conn.close()

    def _write(self, conn: psycopg.Connection[Any] | None, batch: list[_Outcome]) -> psycopg.Connection[Any] | None:
        """One finish_jobs call for batch, retried on connection errors for up to a lease
        (a retry after a lost reply reports lost: fencing makes it harmless). A batch
        the database refuses is written one outcome at a time, so one bad outcome (an
        output over the limit) cannot hold the others back."""
        # The outcomes travel as one JSON array (json.dumps is C; the driver's array
        # dumpers are Python) and their statuses come back as one text.
        query = sql.SQL(
            "SELECT string_agg(f.status, ',' ORDER BY f.n) FROM (SELECT "
            "array_agg((v->>0)::uuid ORDER BY x.n) AS ids, array_agg((v->>1)::uuid ORDER BY x.n) AS tokens, "
            "array_agg(v->>2 ORDER BY x.n) AS actions, "
            "array_agg((v->>3)::bigint * interval '1 microsecond' ORDER BY x.n) AS delays, "
            "array_agg(v->>4 ORDER BY x.n) AS errors, array_agg((v->>5)::jsonb ORDER BY x.n) AS outputs "
            "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS x(v, n)) AS a, "
            "{}.finish_jobs(a.ids, a.tokens, a.actions, a.delays, a.errors, a.outputs) WITH ORDINALITY AS f(job_id, status, n)"
        ).format(self._s)
        us = datetime.timedelta(microseconds=1)
        payload = json.dumps([[o.job.id, o.job.lease_token, o.action, None if o.delay is None else o.delay // us,
                               o.error, o.output] for o in batch])
        deadline = time.monotonic() + self.lease
        backoff = 0.1
        while True:
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = self._connect()
                text = conn.execute(query, (payload,)).fetchone()[0]  # type: ignore[index]
                statuses = text.split(",")
                break
            except psycopg.errors.InvalidParameterValue as e:
                if len(batch) > 1:
                    for o in batch:
                        conn = self._write(conn, [o])
                    return conn
                o = batch[0]
                if o.action == "complete":
                    log.warning("skiplock: job %s: its output was refused; retrying the job: %s", o.job.id, e)
                    return self._write(conn, [_Outcome(o.job, "retry",
                                                       error=clean_text(f"the handler's output was refused: {e}"))])
                log.error("skiplock: job %s: its outcome (%s) was refused; the job will run again: %s", o.job.id, o.action, e)
                self._release([o.job])
                return conn
            except psycopg.Error as e:
                if not _retryable(e) or time.monotonic() > deadline:
                    log.error("skiplock: recording %d outcome(s) failed; the jobs will run again once their leases expire: %s",
                              len(batch), e)
                    self._release([o.job for o in batch])
                    return None
                log.warning("skiplock: recording %d outcome(s) failed (retrying): %s", len(batch), e)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(backoff)  # a pause before retrying, not synchronisation
                backoff = min(backoff * 2, 2.0)
        for o, status in zip(batch, statuses):
            if status == "lost" and not o.job._completed_in_tx and not o.job._lost:
                log.warning("skiplock: job %s (%s): lease lost; its outcome (%s) was not recorded", o.job.id, o.job.kind, o.action)
        self._release([o.job for o in batch])
        return conn
