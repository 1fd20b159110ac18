package store

// Batches: opening one (with its callback jobs, inserted waiting), adding members
// while it is open, sealing it, and reading it. The counting and the firing of the
// callbacks are triggers and functions of migration 0013 (jobs_flow_settle,
// batch_fire): they run inside each member's own state change.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

type batchStatements struct {
	open, add, seal, get, list, members stmt
}

// batchColumns is what BatchGet and BatchList read of a batch.
const batchColumns = `id, description, on_complete, on_failure, total, succeeded, failed, cancelled, removed,
  created_at, sealed_at, completed_at, failure_fired_at`

func newBatchStatements(b *builder) batchStatements {
	return batchStatements{
		// The batch and its callbacks (inserted waiting) in one statement, so neither
		// exists without the other.
		open: b.add("batch_open", flowInsertCTE("")+`,
b AS (
  INSERT INTO {{s}}.batches (id, description, on_complete, on_failure, created_at)
  SELECT $22, $23, $24, $25, t.now FROM t
  RETURNING id
)
SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM b)`),

		// Members are inserted only while the batch is open. The KEY SHARE lock on the
		// batch row is held until the adding transaction ends: sealing (FOR UPDATE)
		// waits for it, while members' completions (NO KEY UPDATE) do not.
		add: b.add("batch_add", flowInsertCTE(`(SELECT id FROM {{s}}.batches WHERE id = $22 AND sealed_at IS NULL FOR KEY SHARE) AS hold`)+`
SELECT count(*) FROM ins`),

		seal: b.add("batch_seal", `SELECT {{s}}.batch_seal($2::uuid, coalesce($1::timestamptz, now()))`),

		get: b.add("batch_get", `SELECT `+batchColumns+` FROM {{s}}.batches WHERE id = $1`),

		// Newest first, paged by id. The cursor is an index condition even on the
		// first page (no id is above the greatest uuid), so the scan starts where the
		// page does.
		list: b.add("batch_list", `
SELECT `+batchColumns+` FROM {{s}}.batches
WHERE id < coalesce($1::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff') AND (NOT $3::bool OR completed_at IS NULL)
ORDER BY id DESC
LIMIT $2`),

		// A batch's members per status (jobs_batch_idx).
		members: b.addGuarded(planGuardOn, "batch_members", `
SELECT `+statusRead("")+`, count(*) FROM {{s}}.jobs WHERE batch_id = $1 GROUP BY 1`),
	}
}

// BatchRow is a row of the batches table.
type BatchRow struct {
	ID                           string
	Description                  string
	OnComplete, OnFailure        *string
	Total                        *int // nil until sealed
	Succeeded, Failed, Cancelled int
	Removed                      int
	CreatedAt                    time.Time
	SealedAt, CompletedAt        *time.Time
	FailureFiredAt               *time.Time
}

func scanBatch(row pgx.Row) (*BatchRow, error) {
	var b BatchRow
	err := row.Scan(&b.ID, &b.Description, &b.OnComplete, &b.OnFailure, &b.Total, &b.Succeeded, &b.Failed, &b.Cancelled,
		&b.Removed, &b.CreatedAt, &b.SealedAt, &b.CompletedAt, &b.FailureFiredAt)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// BatchOpen inserts a batch with id and its callback jobs (nodes, inserted waiting).
func (s *Store) BatchOpen(ctx context.Context, db DBTX, now *time.Time, id [16]byte, description string,
	onComplete, onFailure *[16]byte, callbacks []FlowNode, nt *Notify) error {
	args := append(flowArgs(now, callbacks, nt), id, description, onComplete, onFailure)
	var jobs, batches int64
	return db.QueryRow(ctx, s.batches.open.sql, args...).Scan(&jobs, &batches)
}

// BatchAdd inserts members of an open batch and returns how many it inserted: none
// when the batch is sealed or does not exist.
func (s *Store) BatchAdd(ctx context.Context, db DBTX, now *time.Time, batch string, nodes []FlowNode, nt *Notify) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.batches.add.sql, append(flowArgs(now, nodes, nt), batch)...).Scan(&n)
	return n, err
}

// BatchSeal seals a batch (a no-op when it is sealed already) and fires its callback
// if every member has finished; false when no batch has the id.
func (s *Store) BatchSeal(ctx context.Context, db DBTX, now *time.Time, id string) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, s.batches.seal.sql, Now(now), id).Scan(&found)
	return found, err
}

// BatchGet returns one batch, or pgx.ErrNoRows.
func (s *Store) BatchGet(ctx context.Context, db DBTX, id string) (*BatchRow, error) {
	return scanBatch(db.QueryRow(ctx, s.batches.get.sql, id))
}

// BatchList returns up to limit batches older than before ("" for the newest),
// newest first; only those not completed when open is set.
func (s *Store) BatchList(ctx context.Context, db DBTX, before string, limit int, open bool) ([]*BatchRow, error) {
	rows, err := db.Query(ctx, s.batches.list.sql, nullable(before), limit, open)
	return collect(rows, err, scanBatch)
}

// BatchMembers counts a batch's members per status.
func (s *Store) BatchMembers(ctx context.Context, db DBTX, id string) (map[string]int64, error) {
	return guarded(ctx, db, s.batches.members, collectMap[int64], id)
}
