"""Enqueueing through skiplock's SQL enqueue function (docs/sql_enqueue.md)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

DEFAULT_SCHEMA = "skiplock"


@dataclass(frozen=True)
class EnqueueResult:
    """The job's id, or that of the job already holding the deduplication key."""

    id: str
    duplicate: bool


def enqueue(
    conn: psycopg.Connection[Any],
    kind: str,
    args: Any = None,
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime.datetime | None = None,
    max_attempts: int = 8,
    deduplication_key: str | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> EnqueueResult:
    """Enqueue one job in conn's current transaction (autocommit: its own).

    The job exists if and only if that transaction commits. args is the job's JSON
    payload (None: {}). A refused argument raises psycopg.errors.InvalidParameterValue,
    whose diag.column_name names it, and writes nothing.
    """
    row = conn.execute(
        sql.SQL(
            "SELECT id::text, duplicate FROM {}.enqueue(%s, %s, queue => %s, priority => %s, "
            "run_at => %s, max_attempts => %s, deduplication_key => %s)"
        ).format(sql.Identifier(schema)),
        (kind, Jsonb({} if args is None else args), queue, priority, run_at, max_attempts, deduplication_key),
    ).fetchone()
    assert row is not None  # enqueue returns exactly one row
    return EnqueueResult(id=row[0], duplicate=row[1])
