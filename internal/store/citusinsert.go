package store

// The one-job enqueue on the Citus layout (docs/citus.md, "The plan: every statement
// on the layout"): an INSERT … VALUES that names the job's concurrency_key, which
// Citus sends as a router query to the one node holding the key's shard, instead of
// insertSQL's and insertPlainSQL's INSERT … SELECT, which the coordinator pulls up,
// runs itself and only then routes (a second hop), and which waits during a
// block_writes shard move whatever its key.
//
// Citus evaluates on the coordinator, before it routes the row, every function in a
// router insert's VALUES whose arguments are parameters or constants: the id's
// default (uuid_v7(), as on one node: ids keep their order), the statement's time
// (citus_clock($1): the injected clock's reading or the coordinator's now()), and the
// NOTIFY (pg_notify, so it is sent by the coordinator the listeners are connected to,
// at the commit of the caller's transaction). It evaluates each such call whatever a
// CASE around it says, and a VALUES list may hold no subquery; so the NOTIFY of the
// job's one queue is a variant of its own (citusNotify), and the unique key's period
// divides by nullif(period, 0).
//
// What the single-node inserts keep and these keep too: the job's row and every
// column value, the deduplication (ON CONFLICT DO NOTHING, the holder then looked up
// by key: dedup_holders_citus), the unique key (the BEFORE INSERT trigger skips the
// row; unique_holders_citus), the key table's trigger and the lineage row (written by
// the layout's trigger on the key's node). Solo (InsertParams.Solo) has no effect on
// the layout: its setting would be made on the coordinator and the lineage trigger
// reads it on the node, so the lineage row is always written there (as with the
// INSERT … SELECT). A job with a sequence key keeps the INSERT … SELECT: its advisory
// lock must be taken before its id is made (sequenceLock), which a VALUES list cannot
// order. A batch (InsertMany) keeps it too.

import "context"

// citusInsertStatements are the router inserts, by [dedup][notify] for a job with a
// deduplication or unique key (insertSQL's parameters) and by [notify] for a plain
// job (insertPlainSQL's).
type citusInsertStatements struct {
	insert [2][2]stmt
	plain  [2]stmt
}

// citusNotify is the value a router insert appends to the job's queue, an empty
// string: with notify, pg_notify's result as text, which sends the NOTIFY of the one
// queue $11 on the channel $10; without, a constant that names $10, $11 and the solo
// parameter solo so that their types are known (a statement's every parameter must be
// used).
func citusNotify(notify bool, solo string) string {
	if notify {
		return `pg_catalog.pg_notify($10::text, ($11::text[])[1])::text || CASE WHEN ` + solo + `::bool THEN '' ELSE '' END`
	}
	return `CASE WHEN $10::text IS NULL AND $11::text[] IS NULL AND ` + solo + `::bool THEN '' ELSE '' END`
}

// citusUniqueKey is uniqueKeyExpr with the statement's time from citus_clock($1).
func citusUniqueKey(key, periodUS string) string {
	return `CASE WHEN ` + key + ` IS NULL THEN NULL
            WHEN ` + periodUS + ` > 0 THEN ` + key + ` || '@' ||
              floor(extract(epoch FROM ` + citusNow + `) * 1000000 / nullif(` + periodUS + `, 0))::bigint::text
            ELSE ` + key + ` END`
}

// citusInsertSQL is insertSQL without a sequence key, as a router insert.
func citusInsertSQL(dedup, notify bool) string {
	return `
INSERT INTO {{s}}.jobs (queue, kind, payload, priority, run_at, max_attempts, deduplication_key, metadata,
                       unique_key, unique_states, sequence_key, sequence_skip_failed, tags, concurrency_key, created_at, updated_at)
VALUES ($2::text || ` + citusNotify(notify, "$20") + `, $3, $4::jsonb, $5, coalesce($6::timestamptz, {{s}}.citus_after(` + citusNow + `, $7::bigint)), $8, $9, $12::jsonb,
       ` + citusUniqueKey("$13::text", "$14::bigint") + `, string_to_array($15::text, ',')::{{s}}.job_status[],
       $16::text, coalesce($17::bool, false), $18::text[], $19::text, ` + citusNow + `, ` + citusNow + `)
` + onConflict(dedup) + `RETURNING id`
}

// citusInsertPlainSQL is insertPlainSQL as a router insert.
func citusInsertPlainSQL(notify bool) string {
	return `
INSERT INTO {{s}}.jobs (queue, kind, payload, priority, run_at, max_attempts, metadata, tags, concurrency_key, created_at, updated_at)
VALUES ($2::text || ` + citusNotify(notify, "$14") + `, $3, $4::jsonb, $5, coalesce($6::timestamptz, {{s}}.citus_after(` + citusNow + `, $7::bigint)), $8, $9::jsonb,
       $12::text[], $13::text, ` + citusNow + `, ` + citusNow + `)
RETURNING id`
}

func newCitusInsertStatements(b *builder) citusInsertStatements {
	return citusInsertStatements{
		insert: [2][2]stmt{
			{b.addCitus("", "citus_insert", citusInsertSQL(false, false)), b.addCitus("", "citus_insert_notify", citusInsertSQL(false, true))},
			{b.addCitus("", "citus_insert_dedup", citusInsertSQL(true, false)), b.addCitus("", "citus_insert_dedup_notify", citusInsertSQL(true, true))},
		},
		plain: [2]stmt{b.addCitus("", "citus_insert_plain", citusInsertPlainSQL(false)), b.addCitus("", "citus_insert_plain_notify", citusInsertPlainSQL(true))},
	}
}

// citusInsertSQLFor returns the router insert for p on the Citus layout, or "" when p
// keeps the INSERT … SELECT: a sequence key, or a NOTIFY of more than one queue.
// Solo is not passed on (see above).
func (s *Store) citusInsertSQLFor(ctx context.Context, db DBTX, p *InsertParams, n *Notify) (string, error) {
	if p.SequenceKey != nil {
		return "", nil
	}
	_, qs := n.args()
	if len(qs) > 1 {
		return "", nil
	}
	dist, err := s.Distributed(ctx, db)
	if err != nil || !dist {
		return "", err
	}
	// After its commit (notifyAfter), queryInsert announces the queue itself.
	_, after := notifyAfter(db, n)
	notify := b2i(len(qs) == 1 && !after)
	if p.DedupKey == nil && p.UniqueKey == nil {
		return s.enqueue.citus.plain[notify].sql, nil
	}
	return s.enqueue.citus.insert[b2i(p.DedupKey != nil)][notify].sql, nil
}
