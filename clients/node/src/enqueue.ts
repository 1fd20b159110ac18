// Enqueueing through skiplock's SQL enqueue function (docs/sql_enqueue.md).

import type { ClientBase, Pool } from "pg";

/** The schema skiplock's tables and functions live in unless configured otherwise. */
export const DEFAULT_SCHEMA = "skiplock";

/** Something to run a query on: a pg Pool, or a Client / PoolClient (in a transaction or not). */
export type Queryable = Pool | ClientBase;

/** The job's id, or that of the job already holding the deduplication key. */
export interface EnqueueResult {
  id: string;
  duplicate: boolean;
}

/** Options of enqueue; each maps to the SQL function's argument of the same name. */
export interface EnqueueOptions {
  queue?: string;
  priority?: number;
  runAt?: Date | null;
  maxAttempts?: number;
  deduplicationKey?: string | null;
  schema?: string;
}

/** Quotes a PostgreSQL identifier (a schema name). */
export function quoteIdent(name: string): string {
  if (typeof name !== "string" || name === "" || name.includes("\0")) {
    throw new TypeError(`skiplock: invalid schema name ${JSON.stringify(name)}`);
  }
  return '"' + name.replace(/"/g, '""') + '"';
}

/**
 * Enqueues one job in db's current transaction (a Pool or a client outside a
 * transaction: its own). The job exists if and only if that transaction commits.
 * args is the job's JSON payload (undefined or null: {}). A refused argument rejects
 * with pg's DatabaseError, code 22023, whose `column` names it; nothing is written.
 */
export async function enqueue(db: Queryable, kind: string, args?: unknown, opts: EnqueueOptions = {}): Promise<EnqueueResult> {
  const s = quoteIdent(opts.schema ?? DEFAULT_SCHEMA);
  const res = await db.query<{ id: string; duplicate: boolean }>(
    `SELECT id::text AS id, duplicate FROM ${s}.enqueue($1, $2::jsonb, queue => $3, priority => $4, ` +
      `run_at => $5, max_attempts => $6, deduplication_key => $7)`,
    [
      kind,
      JSON.stringify(args ?? {}),
      opts.queue ?? "default",
      opts.priority ?? 0,
      opts.runAt ?? null,
      opts.maxAttempts ?? 8,
      opts.deduplicationKey ?? null,
    ],
  );
  const row = res.rows[0];
  return { id: row.id, duplicate: row.duplicate };
}
