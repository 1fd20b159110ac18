package store

// Flows: inserting a tree of jobs (a parent waits for its children), reading a
// parent's children and a whole tree. The counting and the release of parents are
// triggers of migration 0013 (jobs_flow_note, jobs_flow_settle, jobs_flow_cascade):
// they run inside each child's own state change, so no statement here releases a
// parent.

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatusWaiting is the status of a parent whose children have not all finished, and
// of a batch's callback before the batch fires it.
const StatusWaiting = "waiting"

type flowStatements struct {
	insert, children, tree, waiting stmt
}

// flowInsertCTE is the CTE "ins" that inserts nodes given as parallel arrays, with
// ids chosen by the caller (so children can name their parent in the same
// statement), and the CTE "t" it reads the time and the NOTIFY from ($10, $11). hold
// is a FROM item whose absence of rows inserts nothing (the open-batch check), or "".
func flowInsertCTE(hold string) string {
	lock, from := lockCTE(true, "$13::text[]")
	if hold != "" {
		hold = ", " + hold
	}
	return `WITH ` + lock + `t AS MATERIALIZED (SELECT coalesce($1::timestamptz, now()) AS now, ` + notifyColumn + from + `),
ins AS (
  INSERT INTO {{s}}.jobs (id, queue, kind, payload, priority, run_at, max_attempts, metadata, tags, sequence_key,
                          sequence_skip_failed, parent_id, batch_id, status, flow_policy, flow_open, concurrency_key,
                          created_at, updated_at)
  SELECT i.id, i.queue, i.kind, i.payload, i.priority, coalesce(i.run_at, t.now + i.delay_us * interval '1 microsecond'),
         i.max_attempts, i.metadata, string_to_array(i.tags, E'\x1f'), i.seq, coalesce(i.seq_skip, false), i.parent_id,
         i.batch_id, i.status::{{s}}.job_status, i.policy, i.open, i.ckey, t.now, t.now
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::int[], $7::timestamptz[], $8::bigint[], $9::int[],
              $12::jsonb[], $13::text[], $14::bool[], $15::text[], $16::uuid[], $17::uuid[], $18::text[], $19::text[], $20::int[],
              $21::text[])
       WITH ORDINALITY AS i(id, queue, kind, payload, priority, run_at, delay_us, max_attempts, metadata, seq, seq_skip,
                            tags, parent_id, batch_id, status, policy, open, ckey, ord),
       t` + hold + `
  WHERE t.notified >= 0
  ORDER BY i.ord
  RETURNING id
)`
}

// childColumns is what Children and the tree read of a node.
const childColumns = `j.id, j.parent_id, j.kind, j.queue, j.status::text, j.attempts, j.max_attempts, j.last_error,
  j.output, j.flow_policy, j.flow_open, j.created_at, j.updated_at`

func newFlowStatements(b *builder) flowStatements {
	return flowStatements{
		insert: b.add("flow_insert", flowInsertCTE("")+`
SELECT count(*) FROM ins`),

		// A parent's children, oldest first (jobs_parent_idx). Under the "ignore"
		// policy the failed and cancelled ones are left out. The children are found
		// first and sorted after: asked for them in id order, a plan made while the
		// table's statistics said it was nearly empty walked the whole primary key.
		children: b.addGuarded(planGuardOn, "flow_children", `
WITH c AS MATERIALIZED (
  SELECT `+childColumns+`
  FROM {{s}}.jobs j
  WHERE j.parent_id = $1
    AND (j.status NOT IN ('failed', 'cancelled')
         OR coalesce((SELECT p.flow_policy FROM {{s}}.jobs p WHERE p.id = $1), '') <> 'ignore'))
SELECT * FROM c ORDER BY id LIMIT $2`),

		// The whole tree a job belongs to: up to its top-most ancestor, then down
		// (jobs_parent_idx), at most $2 nodes, by depth. Each step probes jobs with
		// the ids it has (lateral subqueries, kept from being flattened into joins by
		// OFFSET 0), so no statistics can make a step read the table whole.
		tree: b.addGuarded(planGuardOn, "flow_tree", `
WITH RECURSIVE up AS (
  SELECT id, parent_id, 0 AS d FROM {{s}}.jobs WHERE id = $1
  UNION ALL
  SELECT j.id, j.parent_id, up.d + 1
  FROM up CROSS JOIN LATERAL (SELECT j.id, j.parent_id FROM {{s}}.jobs j WHERE j.id = up.parent_id OFFSET 0) j
  WHERE up.d < 64
), down AS (
  SELECT id, 0 AS depth FROM (SELECT id FROM up ORDER BY d DESC LIMIT 1) AS root
  UNION ALL
  SELECT j.id, down.depth + 1
  FROM down CROSS JOIN LATERAL (SELECT j.id FROM {{s}}.jobs j WHERE j.parent_id = down.id OFFSET 0) j
  WHERE down.depth < 64
)
SELECT down.depth, j.*
FROM down CROSS JOIN LATERAL (SELECT `+childColumns+` FROM {{s}}.jobs j WHERE j.id = down.id OFFSET 0) j
ORDER BY down.depth, j.id
LIMIT $2`),

		// Waiting jobs per queue (jobs_waiting_idx) and open batches.
		waiting: b.addGuarded(planGuardOn, "stats_waiting", `
SELECT queue, count(*) FROM {{s}}.jobs WHERE status > 'cancelled' AND status = 'waiting' GROUP BY queue
UNION ALL
SELECT NULL, count(*) FROM {{s}}.batches WHERE completed_at IS NULL`),
	}
}

// FlowNode is one job to insert by InsertFlow.
type FlowNode struct {
	InsertParams
	ID       [16]byte
	ParentID *[16]byte
	BatchID  *[16]byte
	Waiting  bool    // inserted as waiting (a parent, a batch callback), else pending
	Policy   *string // a parent's failure policy
	Open     *int    // a parent's number of children
}

// flowArgs are the statement parameters $2..$21 of nodes ($10, $11 the NOTIFY).
func flowArgs(now *time.Time, nodes []FlowNode, nt *Notify) []any {
	n := len(nodes)
	ids, parents, batches := make([][16]byte, n), make([]*[16]byte, n), make([]*[16]byte, n)
	queues, kinds, payloads := make([]string, n), make([]string, n), make([]string, n)
	prios, maxes, opens := make([]int32, n), make([]int32, n), make([]*int32, n)
	runAts, delays := make([]*time.Time, n), make([]int64, n)
	metas, seqs, seqSkips, tags := make([]*string, n), make([]*string, n), make([]bool, n), make([]*string, n)
	statuses, policies, ckeys := make([]string, n), make([]*string, n), make([]string, n)
	for i := range nodes {
		p := &nodes[i]
		ckeys[i] = p.ConcurrencyKey
		ids[i], parents[i], batches[i] = p.ID, p.ParentID, p.BatchID
		queues[i], kinds[i], payloads[i] = p.Queue, p.Kind, string(p.Payload)
		prios[i], maxes[i] = int32(p.Priority), int32(p.MaxAttempts)
		runAts[i], delays[i], metas[i] = p.RunAt, micros(p.Delay), jsonOrNil(p.Metadata)
		seqs[i], seqSkips[i] = p.SequenceKey, p.SequenceSkipFailed
		if p.Tags != nil {
			t := strings.Join(p.Tags, "\x1f") // tags hold no control characters
			tags[i] = &t
		}
		statuses[i] = StatusPending
		if p.Waiting {
			statuses[i] = StatusWaiting
		}
		policies[i] = p.Policy
		if p.Open != nil {
			o := int32(*p.Open)
			opens[i] = &o
		}
	}
	ch, qs := nt.args()
	return []any{Now(now), ids, queues, kinds, payloads, prios, runAts, delays, maxes, ch, qs, metas,
		seqs, seqSkips, tags, parents, batches, statuses, policies, opens, ckeys}
}

// InsertFlow inserts nodes in one statement (parents and children alike; a parent
// names its children's count in Open) and returns how many it inserted.
func (s *Store) InsertFlow(ctx context.Context, db DBTX, now *time.Time, nodes []FlowNode, nt *Notify) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, s.flows.insert.sql, flowArgs(now, nodes, nt)...).Scan(&n)
	return n, err
}

// CopyFlow writes nodes without sequence keys with COPY, as CopyInsert writes plain
// jobs: with withRunAt every node's RunAt must be set, else run_at takes the
// database's now(); a non-nil now sets created_at and updated_at.
func (s *Store) CopyFlow(ctx context.Context, db Copier, nodes []FlowNode, withRunAt bool, now *time.Time, marks LaneMarks) error {
	extra := []string{"parent_id", "batch_id", "status", "flow_policy", "flow_open"}
	return s.copyJobs(ctx, db, len(nodes), extra, withRunAt, now, marks, func(i int, w *copyRow) *InsertParams {
		p := &nodes[i]
		w.uuid(p.ID)
		w.uuidOrNull(p.ParentID)
		w.uuidOrNull(p.BatchID)
		if p.Waiting {
			w.text(StatusWaiting)
		} else {
			w.text(StatusPending)
		}
		w.textOrNull(p.Policy)
		w.int4OrNull(p.Open)
		return &p.InsertParams
	})
}

// FlowJob is a node of a flow as Children and FlowTree read it.
type FlowJob struct {
	Depth       int
	ID          string
	ParentID    *string
	Kind        string
	Queue       string
	Status      string
	Attempts    int
	MaxAttempts int
	LastError   *string
	Output      json.RawMessage
	Policy      *string
	Open        *int
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

func scanFlowJob(row pgx.Row, depth bool) (*FlowJob, error) {
	var j FlowJob
	dest := []any{&j.ID, &j.ParentID, &j.Kind, &j.Queue, &j.Status, &j.Attempts, &j.MaxAttempts, &j.LastError,
		&j.Output, &j.Policy, &j.Open, &j.CreatedAt, &j.UpdatedAt}
	if depth {
		dest = append([]any{&j.Depth}, dest...)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	return &j, nil
}

// Children returns up to limit children of parent, oldest first.
func (s *Store) Children(ctx context.Context, db DBTX, parent string, limit int) ([]*FlowJob, error) {
	return guarded(ctx, db, s.flows.children, func(rows pgx.Rows, err error) ([]*FlowJob, error) {
		return collect(rows, err, func(r pgx.Row) (*FlowJob, error) { return scanFlowJob(r, false) })
	}, parent, limit)
}

// FlowTree returns up to limit nodes of the tree id belongs to, from its top-most
// ancestor down, by depth then id. Empty when no job has the id.
func (s *Store) FlowTree(ctx context.Context, db DBTX, id string, limit int) ([]*FlowJob, error) {
	return guarded(ctx, db, s.flows.tree, func(rows pgx.Rows, err error) ([]*FlowJob, error) {
		return collect(rows, err, func(r pgx.Row) (*FlowJob, error) { return scanFlowJob(r, true) })
	}, id, limit)
}

// WaitingStats returns the waiting jobs per queue and the number of batches that have
// not completed.
func (s *Store) WaitingStats(ctx context.Context, db DBTX) (map[string]int64, int64, error) {
	var open int64
	byQueue, err := guarded(ctx, db, s.flows.waiting, func(rows pgx.Rows, err error) (map[string]int64, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		byQueue := map[string]int64{}
		for rows.Next() {
			var q *string
			var n int64
			if err := rows.Scan(&q, &n); err != nil {
				return nil, err
			}
			if q == nil {
				open = n
			} else {
				byQueue[*q] = n
			}
		}
		return byQueue, rows.Err()
	})
	if err != nil {
		return nil, 0, err
	}
	return byQueue, open, nil
}
