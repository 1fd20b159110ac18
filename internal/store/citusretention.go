package store

// Retention on the Citus layout (docs/citus.md, "Retention and the scheduler on
// Citus"): the single-node deletes (retention.go, the outbox's prunes) lock and delete
// across keys, which Citus refuses (FOR UPDATE runs on one shard only; the lineage's
// delete by ctid cannot be planned). Here every delete names one concurrency_key, so
// it runs as a router query on the key's node, and finds its rows by a bounded read of
// every shard first:
//
//   - a walk (multi-shard, custom plan) reads the oldest rows past their window, with
//     their keys, through the index the single-node statement uses (jobs_retention_idx,
//     outbox_published_idx, outbox_dead_idx, the lineage's BRIN), each shard's read
//     bounded by the batch's LIMIT — as the reclaimer's citus_expired does;
//   - then one delete per key of the batch, naming the key and the ids it read (the
//     primary key (id, concurrency_key)), re-checking each row's state and age and
//     skipping a row another transaction holds (SKIP LOCKED), as on one node.
//
// A batch of n rows over k keys costs one read of every shard and k router deletes.
// Lineage rows go by age, as on one node (one day past the longest window): the walk
// reads (key, transaction id) pairs, and each key's delete takes the rows of those
// transactions by the lineage's txid index. Flows are refused on the layout, and a
// schema is laid out only once its flows have finished, so the single-node delete's
// wait for a child's unfinished parent has nothing to wait for here.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

type citusRetentionStatements struct {
	finished, deleteFinished    stmt
	lineage, pruneLineage       stmt
	outboxPublished, outboxDead stmt
	deletePublished, deleteDead stmt
}

// citusCutoff is the statement's time less $3 microseconds: the end of a retention
// window on the Citus layout, evaluated on the coordinator.
const citusCutoff = `{{s}}.citus_after(` + citusNow + `, -$3::bigint)`

// citusFinishedWhere selects the finished jobs of state $2 past the window.
const citusFinishedWhere = `status IN ('succeeded', 'failed', 'cancelled')
  AND status = $2::{{s}}.job_status
  AND updated_at < ` + citusCutoff

// The outbox's events published, or parked dead, before the cutoff ($2 microseconds
// ago here: the outbox prunes take no state).
const (
	citusPublishedWhere = `published_at IS NOT NULL AND published_at < {{s}}.citus_after(` + citusNow + `, -$2::bigint)`
	citusDeadWhere      = `dead_at IS NOT NULL AND published_at IS NULL AND dead_at < {{s}}.citus_after(` + citusNow + `, -$2::bigint)`
)

// citusOutboxWalk reads the oldest events matching where, ordered by col, at most $3.
func citusOutboxWalk(where, col string) string {
	return `
SELECT id, concurrency_key FROM {{s}}.outbox
WHERE ` + where + `
ORDER BY ` + col + `
LIMIT $3`
}

// citusOutboxDelete deletes the events $3 of key $4 that still match where.
func citusOutboxDelete(where string) string {
	return `
WITH doomed AS (
  SELECT id FROM {{s}}.outbox
  WHERE concurrency_key = $4 AND ` + idIn("outbox", "$3") + ` AND ` + where + `
  FOR UPDATE SKIP LOCKED
)
DELETE FROM {{s}}.outbox AS o
WHERE o.concurrency_key = $4 AND o.id = ANY(ARRAY(SELECT id FROM doomed))`
}

func newCitusRetentionStatements(b *builder) citusRetentionStatements {
	return citusRetentionStatements{
		// The oldest $4 finished jobs of state $2 past the window, with their keys: a
		// range of every shard's jobs_retention_idx, each bounded by the limit.
		finished: b.addCitus(planCitusCustom, "citus_retention_finished", `
SELECT id, concurrency_key FROM {{s}}.jobs
WHERE `+citusFinishedWhere+`
ORDER BY updated_at
LIMIT $4`),

		// The jobs $4 of key $5, deleted when they are still of state $2 and past the
		// window, and no other transaction holds them.
		deleteFinished: b.addCitus(planCitusCustom, "citus_retention_delete", `
WITH doomed AS (
  SELECT id FROM {{s}}.jobs
  WHERE concurrency_key = $5 AND `+idIn("jobs", "$4")+` AND `+citusFinishedWhere+`
  FOR UPDATE SKIP LOCKED
)
DELETE FROM {{s}}.jobs AS j
WHERE j.concurrency_key = $5 AND j.id = ANY(ARRAY(SELECT id FROM doomed)) AND j.status = $2::{{s}}.job_status`),

		// Up to $3 lineage rows older than $2 microseconds, as (key, transaction id)
		// (the BRIN index on created_at, each shard's read bounded by the limit).
		lineage: b.addCitus(planCitusCustom, "citus_retention_lineage", `
SELECT concurrency_key, txid FROM {{s}}.tx_lineage
WHERE created_at < {{s}}.citus_after(`+citusNow+`, -$2::bigint)
LIMIT $3`),

		// The lineage rows of key $4 written by the transactions $3 and older than $2
		// microseconds (the txid index).
		pruneLineage: b.addCitus(planCitusCustom, "citus_retention_prune_lineage", `
DELETE FROM {{s}}.tx_lineage
WHERE concurrency_key = $4 AND txid = ANY($3::xid8[])
  AND created_at < {{s}}.citus_after(`+citusNow+`, -$2::bigint)`),

		outboxPublished: b.addCitus(planCitusCustom, "citus_outbox_published", citusOutboxWalk(citusPublishedWhere, "published_at")),
		outboxDead:      b.addCitus(planCitusCustom, "citus_outbox_dead", citusOutboxWalk(citusDeadWhere, "dead_at")),
		deletePublished: b.addCitus(planCitusCustom, "citus_outbox_prune_published", citusOutboxDelete(citusPublishedWhere)),
		deleteDead:      b.addCitus(planCitusCustom, "citus_outbox_prune_dead", citusOutboxDelete(citusDeadWhere)),
	}
}

// keyedID is a row a retention walk read: its id and its key.
type keyedID struct{ id, key string }

func collectKeyedIDs(rows pgx.Rows, err error) ([]keyedID, error) {
	return collectValues(rows, err, func(r pgx.Row) (keyedID, error) {
		var k keyedID
		err := r.Scan(&k.id, &k.key)
		return k, err
	})
}

// deleteByKey runs del once per key of rows, in key order, with the key's ids, and
// returns how many rows the deletes removed. args are del's parameters before the ids
// and the key.
func deleteByKey(ctx context.Context, db DBTX, del stmt, rows []keyedID, args ...any) (int64, error) {
	keys, groups := byKey(rows, func(k keyedID) string { return k.key })
	slices.Sort(keys) // every pruner deletes keys in one order
	var total int64
	for _, k := range keys {
		ids := make([]string, len(groups[k]))
		for i, p := range groups[k] {
			ids[i] = rows[p].id
		}
		slices.Sort(ids)
		n, err := guarded(ctx, db, del, affected, append(slices.Clip(args), uuidArg(ids), k)...)
		total += n
		if err != nil {
			return total, fmt.Errorf("key %q: %w", k, err)
		}
	}
	return total, nil
}

// citusDeleteFinished is DeleteFinished on the Citus layout.
func (s *Store) citusDeleteFinished(ctx context.Context, db DBTX, now *time.Time, status string, olderThan time.Duration, limit int) (int64, error) {
	rows, err := guarded(ctx, db, s.citusRet.finished, collectKeyedIDs, Now(now), status, micros(olderThan), limit)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return deleteByKey(ctx, db, s.citusRet.deleteFinished, rows, Now(now), status, micros(olderThan))
}

// citusPruneLineage is PruneLineage on the Citus layout. It may delete more than
// limit rows: every old row of each transaction its read found.
func (s *Store) citusPruneLineage(ctx context.Context, db DBTX, now *time.Time, olderThan time.Duration, limit int) (int64, error) {
	type keyTx struct {
		key  string
		txid uint64
	}
	rows, err := guarded(ctx, db, s.citusRet.lineage, func(rows pgx.Rows, err error) ([]keyTx, error) {
		return collectValues(rows, err, func(r pgx.Row) (keyTx, error) {
			var k keyTx
			err := r.Scan(&k.key, &k.txid)
			return k, err
		})
	}, Now(now), micros(olderThan), limit)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	keys, groups := byKey(rows, func(k keyTx) string { return k.key })
	slices.Sort(keys)
	var total int64
	for _, k := range keys {
		var txids []uint64
		for _, p := range groups[k] {
			txids = append(txids, rows[p].txid)
		}
		slices.Sort(txids)
		txids = slices.Compact(txids) // a transaction's rows come once per row read
		n, err := guarded(ctx, db, s.citusRet.pruneLineage, affected, Now(now), micros(olderThan), txids, k)
		total += n
		if err != nil {
			return total, fmt.Errorf("key %q: %w", k, err)
		}
	}
	return total, nil
}

// citusOutboxPrune is OutboxPrunePublished (dead false) or OutboxPruneDead on the
// Citus layout.
func (s *Store) citusOutboxPrune(ctx context.Context, db DBTX, now *time.Time, olderThan time.Duration, limit int, dead bool) (int64, error) {
	walk, del := s.citusRet.outboxPublished, s.citusRet.deletePublished
	if dead {
		walk, del = s.citusRet.outboxDead, s.citusRet.deleteDead
	}
	rows, err := guarded(ctx, db, walk, collectKeyedIDs, Now(now), micros(olderThan), limit)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return deleteByKey(ctx, db, del, rows, Now(now), micros(olderThan))
}
