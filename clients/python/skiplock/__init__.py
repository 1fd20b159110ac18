"""skiplock for Python: enqueue jobs and work them with the guarantees of skiplock's Go
workers (fenced leases, retries with backoff, exactly-once completion in your own
transaction), through the SQL functions skiplock installs in its schema
(docs/sql_enqueue.md, docs/sql_workers.md)."""

from ._enqueue import DEFAULT_SCHEMA, EnqueueResult, enqueue
from ._worker import Cancel, Handler, Job, LeaseLost, Permanent, Retry, Snooze, Worker, clean_text

__all__ = [
    "DEFAULT_SCHEMA",
    "Cancel",
    "EnqueueResult",
    "Handler",
    "Job",
    "LeaseLost",
    "Permanent",
    "Retry",
    "Snooze",
    "Worker",
    "clean_text",
    "enqueue",
]
