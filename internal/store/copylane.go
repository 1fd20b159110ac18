package store

// The lane marks of a COPY (issue #49): a COPY names its columns but computes no
// expression, so it cannot write grouped = job_grouped(queue) and fair_indexed =
// job_fair(queue) as the insert statements do (migrations 0022 and 0024, grouped and
// fairIndexed in enqueue.go). Left at their default, true, every bulk job entered
// jobs_group_ready_idx (~140 B of WAL and a quarter of the server's CPU per bulk row:
// docs/enqueue_cost.md, "COPY's lane marks") and jobs_fair_idx. CopyLaned reads the
// marks of the batch's queues in the COPY's own transaction, after taking ROW
// EXCLUSIVE on jobs, and the COPY writes them as columns.
//
// Why the lock first: lanes_settle(), which LimitSet and QueueSetFair run after a
// change of job_grouped's or job_fair's body commits, waits for every transaction
// that holds ROW EXCLUSIVE on jobs when it starts, then marks what they left
// unmarked. A transaction that reads the marks before it holds the lock could read
// the previous body, let the settle pass it by, and COPY unmarked jobs into a queue
// limited or made fair after the call returned (for a fair queue that job would be
// invisible to the fair claim until the lane settler's next pass). With the lock taken
// first, either the lock came before the change committed (the settle waits for this
// transaction and marks its jobs), or it came after, and taking it anew accepted the
// catalog's invalidations: the read that follows sees the new body.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lanes are one queue's lane marks: the values of jobs.grouped (migration 0022, the
// limited claim's jobs_group_ready_idx) and jobs.fair_indexed (0024, the fair claim's
// jobs_fair_idx) its jobs are written with.
type Lanes struct {
	Grouped, FairIndexed bool
}

// LaneMarks are the lane marks of a COPY's queues (CopyLaned).
type LaneMarks map[string]Lanes

// of returns queue's marks; a queue not read is marked in both (the columns' default,
// which keeps its jobs in every index a claim may read).
func (m LaneMarks) of(queue string) Lanes {
	l, ok := m[queue]
	if !ok {
		return Lanes{Grouped: true, FairIndexed: true}
	}
	return l
}

// copyLanesSQL reads job_grouped and job_fair for each queue of $1 (both inlined: a
// constant or a test against a literal list, no table read).
const copyLanesSQL = `SELECT q, {{s}}.job_grouped(q), {{s}}.job_fair(q) FROM unnest($1::text[]) AS q`

// batcher is a transaction's or a connection's SendBatch.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// CopyLaned runs write — a COPY into jobs through the Copier it is given, with the
// lane marks of queues, the batch's distinct queues — in a transaction that took ROW
// EXCLUSIVE on jobs before it read those marks. db decides the transaction:
//
//   - *pgxpool.Pool: a transaction of its own on one of the pool's connections,
//     committed here. after, when it names queues, is announced in an
//     asynchronously committed transaction pipelined behind the COMMIT (one round
//     trip for both); an error of that NOTIFY alone is returned as notifyErr, the
//     jobs being committed.
//   - *pgx.Conn and *pgxpool.Conn: the same when the connection is outside a
//     transaction, else the caller's.
//   - pgx.Tx: the caller's transaction; after is left to the caller (SendNotify).
//
// For any other Copier, and on the Citus layout (which refuses limits: its jobs keep
// the default mark), write runs on db with nil marks, and owned is false: the caller
// announces after as before. owned reports whether this call committed.
func (s *Store) CopyLaned(ctx context.Context, db Copier, queues []string, after *Notify,
	write func(Copier, LaneMarks) error) (owned bool, notifyErr error, err error) {
	if d, ok := db.(DBTX); ok {
		// Asked before a connection is taken from a pool: on Citus write runs on db
		// itself, and holding a second connection meanwhile could exhaust the pool.
		if dist, err := s.Distributed(ctx, d); err != nil {
			return false, nil, err
		} else if dist {
			return false, nil, write(db, nil)
		}
	}
	var conn *pgx.Conn
	switch d := db.(type) {
	case *pgxpool.Pool:
		pc, err := d.Acquire(ctx)
		if err != nil {
			return false, nil, err
		}
		// A connection left inside a transaction by an error below is closed by
		// Release rather than returned to the pool.
		defer pc.Release()
		conn = pc.Conn()
	case *pgx.Conn:
		conn = d
	case *pgxpool.Conn:
		conn = d.Conn()
	case pgx.Tx:
		conn = d.Conn()
	}
	if conn == nil {
		return false, nil, write(db, nil)
	}
	owned = conn.PgConn().TxStatus() == 'I'
	var b pgx.Batch
	if owned {
		b.Queue("BEGIN")
	}
	b.Queue("LOCK TABLE ONLY " + s.Table("jobs") + " IN ROW EXCLUSIVE MODE")
	b.Queue(s.enqueue.copyLanes.sql, queues)
	marks := make(LaneMarks, len(queues))
	var on batcher = conn
	if tx, ok := db.(pgx.Tx); ok {
		on = tx
	}
	if err := s.readLanes(ctx, on, &b, marks); err != nil {
		if owned {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		return false, nil, fmt.Errorf("reading the lane marks: %w", err)
	}
	if !owned {
		return false, nil, write(db, marks)
	}
	if err := write(conn, marks); err != nil {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		return false, nil, err
	}
	var end pgx.Batch
	end.Queue("COMMIT")
	ch, qs := after.args()
	if len(qs) > 0 {
		end.Queue(s.notify.async.sql, ch, qs)
	}
	br := conn.SendBatch(ctx, &end)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return false, nil, fmt.Errorf("committing: %w", err)
	}
	if len(qs) > 0 {
		_, notifyErr = br.Exec()
	}
	if err := br.Close(); err != nil && notifyErr == nil {
		notifyErr = err
	}
	return true, notifyErr, nil
}

// readLanes sends b (its last statement copyLanesSQL) and fills marks.
func (s *Store) readLanes(ctx context.Context, on batcher, b *pgx.Batch, marks LaneMarks) error {
	br := on.SendBatch(ctx, b)
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return err
	}
	for rows.Next() {
		var q string
		var l Lanes
		if err := rows.Scan(&q, &l.Grouped, &l.FairIndexed); err != nil {
			rows.Close()
			_ = br.Close()
			return err
		}
		marks[q] = l
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		_ = br.Close()
		return err
	}
	return br.Close()
}
