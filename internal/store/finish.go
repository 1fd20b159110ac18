package store

// Finishing: the batched, fenced statements that record what workers report for
// their claimed jobs, and the read-back of a batch's outcome.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// MaxHistory is how many attempts a job's attempt_history keeps (the newest).
const MaxHistory = 20

// historyAppend is the expression that appends one finished attempt of the job row
// alias j to its attempt_history, keeping the newest MaxHistory: the attempt number,
// when the claim started it (attempted_at) and when it ended (t.now), the worker, the
// outcome and the error text (bounded by the caller's text policy).
func historyAppend(j, outcome, errText string) string {
	return `jsonb_path_query_array(coalesce(` + j + `.attempt_history, '[]'::jsonb) || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
      'attempt', ` + j + `.attempts, 'started_at', ` + j + `.attempted_at, 'finished_at', t.now,
      'worker_id', ` + j + `.worker_id, 'outcome', ` + outcome + `, 'error', ` + errText + `))),
      '$[last - ` + strconv.Itoa(MaxHistory-1) + ` to last]')`
}

// finishUpdate is the fenced UPDATE that applies outcomes from the relation o.
// (A redundant "j.id = ANY($2)" was tried to steer the planner to the primary key; it
// let the planner nest a 1,000-element ANY inside a loop over the outcomes, quadratic
// in the batch. A plain join on id plans best.)
// retry → pending after the delay, or failed once attempts are exhausted;
// snooze → pending after the delay with the claim's attempt given back.
func finishUpdate(o string) string { return finishUpdateIn(o, singleNodeRow) }

// rowExprs are the per-row expressions of a fenced write, which differ by layout: on
// one node, the statement's time is its CTE t and the arithmetic is inline; on the
// Citus layout (citusRow, citusclaim.go) Citus must be able to evaluate the time on
// the coordinator and ship the rest to the node of the key.
type rowExprs struct {
	now string // the statement's time
	// after is the time us microseconds after base.
	after func(base, us string) string
	// history appends one finished attempt of j with outcome and error text errText.
	history func(outcome, errText string) string
	// status casts a CASE of job_status labels to the type.
	status func(cases string) string
	from   string // what the UPDATE reads besides its outcomes (", t" on one node)
	where  string // what the UPDATE's WHERE adds (the key, on Citus)
	// statusOut is the status the UPDATE returns ("" on one node: j.status::text).
	statusOut string
}

var singleNodeRow = rowExprs{
	now:     "t.now",
	after:   func(base, us string) string { return base + " + " + us + " * interval '1 microsecond'" },
	history: func(outcome, errText string) string { return historyAppend("j", outcome, errText) },
	status:  func(cases string) string { return "(" + cases + ")::{{s}}.job_status" },
	from:    ", t",
}

func finishUpdateIn(o string, x rowExprs) string {
	if !strings.Contains(o, " AS o(") {
		o += " AS o"
	}
	status := x.statusOut
	if status == "" {
		status = "j.status::text"
	}
	return `UPDATE {{s}}.jobs AS j
SET status = ` + x.status(`CASE o.action
                WHEN 'complete' THEN 'succeeded'
                WHEN 'fail' THEN 'failed'
                WHEN 'cancel' THEN 'cancelled'
                WHEN 'snooze' THEN 'pending'
                ELSE CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END
              END`) + `,
    run_at = CASE
               WHEN o.action = 'snooze' OR (o.action = 'retry' AND j.attempts < j.max_attempts)
               THEN ` + x.after(x.now, "o.delay_us") + `
               ELSE j.run_at
             END,
    attempts = CASE WHEN o.action = 'snooze' THEN j.attempts - 1 ELSE j.attempts END,
    last_error = CASE WHEN o.action IN ('retry', 'fail', 'cancel') THEN o.error ELSE j.last_error END,
    output = CASE WHEN o.action = 'complete' THEN o.output ELSE j.output END,
    attempt_history = CASE WHEN o.action = 'complete' THEN j.attempt_history
                      ELSE ` + x.history(`CASE o.action
                WHEN 'fail' THEN 'failed' WHEN 'cancel' THEN 'cancelled' WHEN 'snooze' THEN 'snoozed'
                ELSE CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'retried' END END`, "o.error") + ` END,
    lease_until = NULL,
    lease_token = NULL,
    worker_id = CASE WHEN o.action = 'complete' THEN j.worker_id END,
    updated_at = ` + x.now + `
FROM ` + o + x.from + `
WHERE j.id = o.id AND j.lease_token = o.token AND ` + idIn("j", "$2") + x.where + `
RETURNING o.n, ` + status
}

type finishStatements struct {
	finish, finishComplete, finishDelete, finished, leaseLost stmt
}

func newFinishStatements(b *builder) finishStatements {
	return finishStatements{
		// leaseLost raises SQLSTATE SK409 (migration 0004), aborting the caller's
		// transaction: CompleteTx's answer to a fenced write that matched no row.
		leaseLost: b.add("lease_lost", `SELECT {{s}}.lease_lost($1::uuid)`),

		// Finish applies many outcomes at once, each fenced by its lease token.
		// retry: pending after the delay, or failed once attempts are exhausted.
		// snooze: pending after the delay and the claim's attempt given back.
		finish: b.addGuarded(planGuardByID, "finish", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
`+finishUpdate("unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[], $7::jsonb[]) WITH ORDINALITY AS o(id, token, action, delay_us, error, output, n)")),

		// finish_complete is finish for a batch whose every outcome is a completion,
		// the steady state of a busy queue: the same fenced write of the same row
		// (status succeeded, the output, the lease cleared, updated_at), without the
		// CASE of each column on the action, which other outcomes need and a
		// completion leaves as it was. It costs about 10% less server CPU per job
		// (docs/benchmarks.md, "W5's time, and two cuts of it");
		// TestFinishCompleteWritesTheSameRow compares its rows with finish's.
		finishComplete: b.addGuarded(planGuardByID, "finish_complete", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now)
UPDATE {{s}}.jobs AS j
SET status = 'succeeded', output = o.output, lease_until = NULL, lease_token = NULL, updated_at = t.now
FROM unnest($2::uuid[], $3::uuid[], $4::jsonb[]) WITH ORDINALITY AS o(id, token, output, n), t
WHERE j.id = o.id AND j.lease_token = o.token AND `+idIn("j", "$2")+`
RETURNING o.n, 'succeeded'`),

		// finish_delete is finish for clients that delete succeeded jobs at once instead
		// of keeping them for retention: completions become fenced DELETEs, the other
		// outcomes the same UPDATE as finish. A child of a flow or a member of a batch
		// is kept as succeeded instead (its parent reads its output; the batch counts
		// it): its completion falls through to the UPDATE, still fenced by the token.
		finishDelete: b.addGuarded(planGuardByID, "finish_delete", `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
o AS (SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::bigint[], $6::text[], $7::jsonb[]) WITH ORDINALITY AS o(id, token, action, delay_us, error, output, n)),
del AS (
  DELETE FROM {{s}}.jobs AS j USING o
  WHERE o.action = 'complete' AND j.id = o.id AND j.lease_token = o.token AND `+idIn("j", "$2")+`
    AND j.parent_id IS NULL AND j.batch_id IS NULL
  RETURNING o.n
),
upd AS (`+finishUpdate("(SELECT * FROM o WHERE action <> 'complete' OR o.n NOT IN (SELECT n FROM del))")+`)
SELECT n, 'succeeded' FROM del UNION ALL SELECT * FROM upd`),

		finished: b.addGuarded(planGuardOn, "finished", `
SELECT id, status::text, attempts, coalesce(last_error, ''), lease_token IS NOT NULL, attempted_at
FROM {{s}}.jobs WHERE id = ANY($1::uuid[])`),
	}
}

// Action is what a worker reports for a claimed job.
type Action string

// The outcomes Finish accepts.
const (
	ActionComplete Action = "complete"
	ActionRetry    Action = "retry"
	ActionFail     Action = "fail"
	ActionSnooze   Action = "snooze"
	ActionCancel   Action = "cancel"
)

// Outcome is one job's result, fenced by its lease.
type Outcome struct {
	Lease
	Action Action
	Delay  time.Duration // retry and snooze
	Error  string        // retry, fail, cancel
	Output []byte        // complete: the handler's JSON output, or nil
}

// Finish applies outcomes in one statement and returns, for each lease it changed a
// job under, the status the job now has. A lease missing from the map was lost:
// nothing was written for it.
//
// The map is keyed by lease, not by job id: one batch can hold two outcomes for the
// same job, one of them under a dead token — a claim lost in a server crash (claims
// commit asynchronously, lease.go) after which the same process claimed the job
// again. Keyed by id, the live outcome's row would have answered for both. Rows come
// back by their outcome's ordinal, so the key is the caller's own Lease as given.
func (s *Store) Finish(ctx context.Context, db DBTX, now *time.Time, outs []Outcome) (map[Lease]string, error) {
	return byLease(outs)(s.FinishEach(ctx, db, now, outs, false))
}

// FinishDeleting is Finish, but a completed job is deleted instead of kept as
// succeeded.
func (s *Store) FinishDeleting(ctx context.Context, db DBTX, now *time.Time, outs []Outcome) (map[Lease]string, error) {
	return byLease(outs)(s.FinishEach(ctx, db, now, outs, true))
}

// FinishEach is Finish, or FinishDeleting when deleting, answering by position: the
// status the outcome outs[i] left its job in, or "" when its lease was lost and
// nothing was written for it. The completer reads its batches' answers so, without
// a map of up to a batch's leases built and probed per batch.
func (s *Store) FinishEach(ctx context.Context, db DBTX, now *time.Time, outs []Outcome, deleting bool) ([]string, error) {
	if deleting {
		return s.runFinish(ctx, db, now, outs, s.finish.finishDelete)
	}
	return s.runFinish(ctx, db, now, outs, s.finish.finish)
}

// byLease turns FinishEach's answer for outs into Finish's.
func byLease(outs []Outcome) func(st []string, err error) (map[Lease]string, error) {
	return func(st []string, err error) (map[Lease]string, error) {
		if err != nil {
			return nil, err
		}
		m := make(map[Lease]string, len(outs))
		for i, v := range st {
			if v != "" {
				m[outs[i].Lease] = v
			}
		}
		return m, nil
	}
}

func (s *Store) runFinish(ctx context.Context, db DBTX, now *time.Time, outs []Outcome, st stmt) ([]string, error) {
	if len(outs) > 0 {
		if dist, err := s.Distributed(ctx, db); err != nil {
			return nil, err
		} else if dist {
			citus := s.citusWork.finish
			if st.name == s.finish.finishDelete.name {
				citus = s.citusWork.finishDelete
			}
			return s.citusFinish(ctx, db, now, outs, citus)
		}
	}
	if st.name == s.finish.finish.name && allComplete(outs) {
		return s.runFinishStmt(ctx, db, now, outs, s.finish.finishComplete)
	}
	return s.runFinishStmt(ctx, db, now, outs, st)
}

// allComplete reports whether every outcome of outs is a completion (finish_complete
// can write them).
func allComplete(outs []Outcome) bool {
	for _, o := range outs {
		if o.Action != ActionComplete {
			return false
		}
	}
	return len(outs) > 0
}

// runFinishStmt runs st for outs; on the Citus layout key is the outcomes' one
// concurrency key, the statement's last parameter.
func (s *Store) runFinishStmt(ctx context.Context, db DBTX, now *time.Time, outs []Outcome, st stmt, key ...string) ([]string, error) {
	n := len(outs)
	ids, tokens, actions, delays, errs := make([]string, n), make([]string, n), make([]string, n), make([]int64, n), make([]*string, n)
	outputs := make([]*string, n)
	order := idOrder(outs, func(o Outcome) string { return o.ID })
	for k, i := range order {
		o := outs[i]
		ids[k], tokens[k], actions[k], delays[k] = o.ID, o.Token, string(o.Action), micros(o.Delay)
		if o.Error != "" {
			e := o.Error
			errs[k] = &e
		}
		outputs[k] = jsonOrNil(o.Output)
	}
	return guarded(ctx, db, st, func(rows pgx.Rows, err error) ([]string, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		done := make([]string, len(outs))
		var n int
		var st string
		dest := []any{&n, &st}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
			if n < 1 || n > len(outs) {
				return nil, fmt.Errorf("finish: the statement returned outcome %d of %d", n, len(outs))
			}
			done[order[n-1]] = internStatus(st)
		}
		return done, rows.Err()
	}, finishArgs(st.name == s.finish.finishComplete.name, now, ids, tokens, actions, delays, errs, outputs, key)...)
}

// internStatus returns the status constant equal to st, so that a batch's answers
// share it instead of holding a copy each.
func internStatus(st string) string {
	for _, c := range [...]string{StatusSucceeded, StatusPending, StatusFailed, StatusCancelled} {
		if st == c {
			return c
		}
	}
	return st
}

// finishArgs are a finishing statement's parameters: finish_complete takes only the
// ids, tokens and outputs (its actions are all completions, which take no delay or
// error); the others take every column, and on the Citus layout the key last.
//
// The arrays of *string go as pgtype.FlatArray, which pgx encodes without reflection.
func finishArgs(complete bool, now *time.Time, ids, tokens, actions []string, delays []int64, errs, outputs []*string, key []string) []any {
	outs := pgtype.FlatArray[*string](outputs)
	if complete {
		return []any{Now(now), uuidArg(ids), uuidArg(tokens), outs}
	}
	return append([]any{Now(now), uuidArg(ids), uuidArg(tokens), actions, delays, pgtype.FlatArray[*string](errs), outs}, anys(key)...)
}

// anys converts ss to a slice of statement parameters.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// FinishedRow is what Finished reads of a job.
type FinishedRow struct {
	Status    string
	Attempts  int
	LastError string
	Running   bool // still leased
	// AttemptedAt is when the job's latest claim took it (nil if never claimed): a
	// finished row whose claim time is not the caller's was finished under another
	// claim, even one with the same attempt number (a claim lost in a server crash
	// is followed by one that counts the same attempt again).
	AttemptedAt *time.Time
}

// Finished reads the state of the given jobs (absent ids were deleted).
func (s *Store) Finished(ctx context.Context, db DBTX, ids []string) (map[string]FinishedRow, error) {
	return guarded(ctx, db, s.finish.finished, func(rows pgx.Rows, err error) (map[string]FinishedRow, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := make(map[string]FinishedRow, len(ids))
		for rows.Next() {
			var id string
			var r FinishedRow
			if err := rows.Scan(&id, &r.Status, &r.Attempts, &r.LastError, &r.Running, &r.AttemptedAt); err != nil {
				return nil, err
			}
			out[id] = r
		}
		return out, rows.Err()
	}, uuidArg(ids))
}

// SQLStateLeaseLost is the SQLSTATE of the error AbortLeaseLost raises.
const SQLStateLeaseLost = "SK409"

// AbortLeaseLost raises SQLSTATE SK409 in db's transaction, so that transaction can
// no longer commit: what a stale worker wrote in it is discarded with it.
func (s *Store) AbortLeaseLost(ctx context.Context, db DBTX, id string) error {
	_, err := db.Exec(ctx, s.finish.leaseLost.sql, id)
	return err
}
