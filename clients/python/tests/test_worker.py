"""The Python client against a real skiplock schema.

Run from the repository root by `go test -run TestPythonClient .`, which starts
PostgreSQL, migrates a schema and sets SKIPLOCK_TEST_DSN and SKIPLOCK_TEST_SCHEMA.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from skiplock import Cancel, Job, LeaseLost, Permanent, Retry, Snooze, Worker, enqueue

DSN = os.environ.get("SKIPLOCK_TEST_DSN", "")
SCHEMA = os.environ.get("SKIPLOCK_TEST_SCHEMA", "")
HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 20.0) -> None:
    """Polls cond until it holds (the condition is the synchronisation; the poll only paces)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Output:
    """A subprocess's output read by a thread of its own, so that a test waits for a
    line with a deadline (and shows what came) rather than forever."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._proc = proc
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._seen: list[str] = []
        stdout = proc.stdout

        def pump() -> None:
            for line in iter(stdout.readline, ""):
                self._lines.put(line)
            self._lines.put(None)
        threading.Thread(target=pump, daemon=True).start()

    def text(self) -> str:
        return "".join(self._seen)

    def expect(self, what: str, want: Callable[[str], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"timed out waiting for {what}; the output so far:\n{self.text()}"
                                     f"{self._stacks()}") from None
            if line is None:
                raise AssertionError(f"the output ended before {what}:\n{self.text()}")
            self._seen.append(line)
            if want(line):
                return

    def _stacks(self) -> str:
        """The stuck process's threads, as faulthandler prints them on SIGUSR1 (the
        subprocess registers it), for a failure to say where the worker waited."""
        if self._proc.poll() is not None:
            return ""
        self._proc.send_signal(signal.SIGUSR1)
        got: list[str] = []
        deadline = time.monotonic() + 3.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            got.append(line)
        return "\nits threads then (faulthandler):\n" + "".join(got)

    def rest(self, timeout: float = 10.0) -> str:
        """Everything the process wrote, once its output has ended."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the output did not end; so far:\n{self.text()}") from None
            if line is None:
                return self.text()
            self._seen.append(line)


@unittest.skipUnless(DSN and SCHEMA, "SKIPLOCK_TEST_DSN and SKIPLOCK_TEST_SCHEMA are not set (run it through go test)")
class WorkerTest(unittest.TestCase):
    conn: psycopg.Connection[Any]

    def setUp(self) -> None:
        self.conn = psycopg.connect(DSN, autocommit=True)
        self.addCleanup(self.conn.close)
        self.queue = "py_" + self.id().rsplit(".", 1)[-1][:40]

    def q(self, name: str) -> sql.Composable:
        return sql.SQL("{}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(name))

    def enqueue(self, kind: str, args: Any = None, **kw: Any) -> str:
        return enqueue(self.conn, kind, args, queue=self.queue, schema=SCHEMA, **kw).id

    def job(self, job_id: str) -> dict[str, Any]:
        cur = self.conn.execute(
            sql.SQL("SELECT status::text, attempts, last_error, output, run_at - now() AS wait, attempt_history, "
                    "lease_token FROM {} WHERE id = %s").format(self.q("jobs")), (job_id,))
        row = cur.fetchone()
        assert row is not None and cur.description is not None
        return dict(zip([d.name for d in cur.description], row))

    def status(self, job_id: str) -> str:
        return str(self.job(job_id)["status"])

    def start(self, handlers: dict[str, Any], **kw: Any) -> Worker:
        kw.setdefault("poll_interval", 0.1)
        w = Worker(DSN, handlers, queue=self.queue, schema=SCHEMA, **kw)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()

        def stop() -> None:
            w.stop()
            t.join(30)
            self.assertFalse(t.is_alive(), "the worker did not stop")
        self.addCleanup(stop)
        return w

    def test_enqueue_and_complete(self) -> None:
        ids = [self.enqueue("greet", {"name": n}) for n in ("ann", "bob", "cy")]
        dup = enqueue(self.conn, "greet", {}, queue=self.queue, schema=SCHEMA, deduplication_key="k")
        again = enqueue(self.conn, "greet", {}, queue=self.queue, schema=SCHEMA, deduplication_key="k")
        self.assertEqual((again.id, again.duplicate), (dup.id, True))
        self.start({"greet": lambda job: {"hello": job.args.get("name"), "attempt": job.attempt}}, concurrency=2)
        wait_for("every job to succeed", lambda: all(self.status(i) == "succeeded" for i in ids + [dup.id]))
        self.assertEqual(self.job(ids[0])["output"], {"hello": "ann", "attempt": 1})

    def test_outcomes(self) -> None:
        def boom(job: Job) -> None:
            raise ValueError("boom\x00")

        def perm(job: Job) -> None:
            raise Permanent("bad address")

        def snooze(job: Job) -> None:
            raise Snooze(3600)

        def cancel(job: Job) -> None:
            raise Cancel("withdrawn")

        def later(job: Job) -> None:
            raise Retry("later", delay=7200)

        def unserialisable(job: Job) -> Any:
            return {"x": float("nan")}

        def exits(job: Job) -> None:
            raise SystemExit("bye")

        ids = {k: self.enqueue(k) for k in ("boom", "perm", "snooze", "cancel", "later", "unserialisable", "exits")}
        last = self.enqueue("boom", max_attempts=1)
        self.start({"boom": boom, "perm": perm, "snooze": snooze, "cancel": cancel, "later": later,
                    "unserialisable": unserialisable, "exits": exits}, concurrency=3,
                   # Every job is due at the start; no poll may claim boom's retry (due
                   # after ~1 s) for 10 s, before it is looked at.
                   poll_interval=10)
        wait_for("every job to be worked", lambda: all(self.job(i)["lease_token"] is None and self.job(i)["attempt_history"]
                                                          for i in list(ids.values()) + [last]))
        j = self.job(ids["boom"])
        self.assertEqual((j["status"], j["attempts"], j["last_error"]), ("pending", 1, "ValueError: boom\ufffd"))
        self.assertTrue(0 < j["wait"].total_seconds() <= 1.1, j["wait"])
        self.assertEqual(self.status(last), "failed")
        self.assertEqual((self.status(ids["perm"]), self.job(ids["perm"])["last_error"]), ("failed", "bad address"))
        j = self.job(ids["snooze"])
        self.assertEqual((j["status"], j["attempts"]), ("pending", 0))
        self.assertTrue(3590 < j["wait"].total_seconds() <= 3600, j["wait"])
        self.assertEqual((self.status(ids["cancel"]), self.job(ids["cancel"])["last_error"]), ("cancelled", "withdrawn"))
        self.assertTrue(7190 < self.job(ids["later"])["wait"].total_seconds() <= 7200)
        j = self.job(ids["unserialisable"])
        self.assertEqual(j["status"], "pending")
        self.assertIn("the handler's output was refused", j["last_error"])
        # A handler's SystemExit is its job's failure, not its executor's end.
        self.assertEqual((self.status(ids["exits"]), self.job(ids["exits"])["last_error"]), ("pending", "SystemExit: bye"))

    def test_complete_tx(self) -> None:
        table = self.q(self.queue + "_charges")
        self.conn.execute(sql.SQL("CREATE TABLE {} (job uuid PRIMARY KEY)").format(table))
        self.addCleanup(lambda: self.conn.execute(sql.SQL("DROP TABLE {}").format(table)))
        lost: list[bool] = []

        def charge(job: Job) -> None:
            if job.args.get("steal"):
                # An operator cancels the job while its handler runs: the lease is gone.
                with psycopg.connect(DSN, autocommit=True) as other:
                    other.execute(sql.SQL("SELECT {}(%s, %s, 'operator')").format(self.q("cancel_job")),
                                  (job.id, job.lease_token))
            try:
                with job.conn.transaction():
                    job.conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (job.id,))
                    job.complete_tx({"charged": True})
            except LeaseLost:
                lost.append(True)
                raise

        ok = self.enqueue("charge")
        stolen = self.enqueue("charge", {"steal": True})
        self.start({"charge": charge})
        wait_for("both jobs to end", lambda: self.status(ok) == "succeeded" and self.status(stolen) == "cancelled")
        wait_for("the stolen job's handler to end", lambda: bool(lost))
        self.assertEqual(self.job(ok)["output"], {"charged": True})
        rows = [r[0] for r in self.conn.execute(sql.SQL("SELECT job::text FROM {}").format(table)).fetchall()]
        self.assertEqual(rows, [ok], "the stolen job's business write must have rolled back")
        self.assertEqual(self.job(stolen)["last_error"], "operator")

    def test_stale_completion_changes_nothing(self) -> None:
        release = threading.Event()
        started = threading.Event()

        def slow(job: Job) -> dict[str, bool]:
            started.set()
            release.wait(30)
            return {"late": True}

        job_id = self.enqueue("slow")
        w = self.start({"slow": slow}, reclaim=False)
        wait_for("the handler to start", started.is_set)
        # The lease runs out and a reclaimer returns the job to the queue.
        self.conn.execute(sql.SQL("UPDATE {} SET lease_until = now() - interval '1 second' WHERE id = %s")
                          .format(self.q("jobs")), (job_id,))
        n = self.conn.execute(sql.SQL("SELECT {}(%s, delay => '1 hour')").format(self.q("reclaim_jobs")),
                              (self.queue,)).fetchone()
        self.assertEqual(n, (1,))
        before = self.job(job_id)
        release.set()
        wait_for("the worker to record the late outcome", lambda: job_id not in w._running)
        after = self.job(job_id)
        self.assertEqual((after["status"], after["output"], after["attempt_history"]),
                         (before["status"], None, before["attempt_history"]))
        self.assertTrue(after["last_error"].startswith("lease expired on worker"))

    def test_heartbeats_keep_the_lease_and_report_its_loss(self) -> None:
        seen: dict[str, Any] = {}

        def long(job: Job) -> None:
            if job.args.get("steal"):
                # An operator cancels the job: the next heartbeat finds the lease lost.
                self.conn.execute(sql.SQL("SELECT {}(%s, %s, 'operator')").format(self.q("cancel_job")),
                                  (job.id, job.lease_token))
                wait_for("the heartbeat to report the lease lost", lambda: job.lease_lost)
                seen["lost"] = True
                return None
            # Runs three leases long: only heartbeats keep the job.
            first = job.lease_until
            wait_for("two renewals", lambda: self.lease_until(job.id).timestamp() > first.timestamp() + 1.5)
            seen["renewed"] = not job.lease_lost
            return None

        kept = self.enqueue("long")
        stolen = self.enqueue("long", {"steal": True})
        self.start({"long": long}, lease=1, concurrency=2, reclaim=True)
        wait_for("both jobs to end", lambda: self.status(kept) == "succeeded" and "lost" in seen)
        self.assertEqual(seen, {"renewed": True, "lost": True})
        self.assertEqual(self.job(kept)["attempts"], 1)
        self.assertEqual(self.status(stolen), "cancelled")

    def lease_until(self, job_id: str) -> Any:
        row = self.conn.execute(sql.SQL("SELECT lease_until FROM {} WHERE id = %s").format(self.q("jobs")), (job_id,)).fetchone()
        assert row is not None and row[0] is not None
        return row[0]

    def test_sigterm_stops_gracefully(self) -> None:
        first = self.enqueue("slow")
        second = self.enqueue("slow")
        proc = self.subprocess("""
            import logging
            logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
            def slow(job):
                print("started", job.id, flush=True)
                sys.stdin.readline()
                return {"done": True}
            Worker(DSN, {"slow": slow}, queue=QUEUE, schema=SCHEMA, concurrency=1).run()
            print("stopped", flush=True)
        """)
        assert proc.stdout is not None and proc.stdin is not None
        out = Output(proc)
        out.expect("the first job to start", lambda line: line.split() == ["started", first])
        proc.send_signal(signal.SIGTERM)
        # The handler is released once the worker has taken the signal: the second job,
        # claimed ahead (prefetch), must then be given back, not started.
        out.expect("the SIGTERM to be taken", lambda line: line.strip() == "skiplock: SIGTERM received: stopping")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the worker did not stop within 30 s of its handler's release:\n" + out.text())
        out = out.rest()
        self.assertEqual(proc.returncode, 0, out)
        self.assertIn("stopped", out)
        self.assertEqual(self.status(first), "succeeded")
        j = self.job(second)
        self.assertEqual((j["status"], j["attempts"]), ("pending", 0), "the unstarted job must be given back")
        self.assertEqual([h["outcome"] for h in j["attempt_history"]], ["snoozed"], "it was claimed ahead, then given back")

    def test_sigkill_and_reclaim(self) -> None:
        job_id = self.enqueue("work")
        proc = self.subprocess("""
            def work(job):
                print("started", job.id, flush=True)
                sys.stdin.readline()
            Worker(DSN, {"work": work}, queue=QUEUE, schema=SCHEMA, lease=1, reclaim=False, name="doomed").run()
        """)
        assert proc.stdout is not None
        self.assertEqual(proc.stdout.readline().split(), ["started", job_id])
        proc.kill()
        proc.wait(10)
        self.start({"work": lambda job: {"attempt": job.attempt}}, lease=1)
        wait_for("the job to be reclaimed and run again", lambda: self.status(job_id) == "succeeded")
        j = self.job(job_id)
        self.assertEqual(j["output"], {"attempt": 2})
        self.assertEqual([h["outcome"] for h in j["attempt_history"]], ["lease_expired"])
        self.assertEqual(j["attempt_history"][0]["worker_id"], "doomed")

    def subprocess(self, body: str) -> subprocess.Popen[str]:
        script = "import faulthandler, signal, sys\nfaulthandler.register(signal.SIGUSR1, all_threads=True)\n" \
            "from skiplock import Worker\n" + f"DSN, SCHEMA, QUEUE = {DSN!r}, {SCHEMA!r}, {self.queue!r}\n" \
            + textwrap.dedent(body)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)

        def end() -> None:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    f.close()
        self.addCleanup(end)
        return proc


if __name__ == "__main__":
    unittest.main()
