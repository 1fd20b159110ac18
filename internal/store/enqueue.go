package store

// Enqueueing: the insert statements (one job, a batch; COPY is copyenc.go) and the follow-up query
// that names the job holding a deduplication key.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

type enqueueStatements struct {
	// The inserts by [sequence][dedup]: with sequence keys or not, with a
	// deduplication key or not (see the comment above onConflict).
	insert, insertMany          [2][2]stmt
	insertPlain                 stmt // a job with no deduplication, unique or sequence key
	dedupHolders, uniqueHolders stmt
	// The holder lookups of the Citus layout (docs/citus.md): a deduplication or unique
	// key is held per concurrency_key there, so each names the key of the jobs whose
	// insert was skipped and runs as a router query on that key's node.
	dedupHoldersCitus, uniqueHoldersCitus stmt
	// The one-job inserts of the Citus layout, router queries (citusinsert.go).
	citus citusInsertStatements
	// A COPY's lane marks, read after its lock (copylane.go).
	copyLanes stmt
}

// sequenceLock is a CTE body that takes a transaction-scoped advisory lock per
// distinct sequence key of keys (a text[] expression; NULLs take none), in key order
// so two enqueuers cannot deadlock. Taken before the ids are generated, it makes a
// sequence's id order its commit order: a job can never commit behind a later job of
// its sequence that a worker has already started. Without sequence keys it takes no
// lock and costs one empty scan.
func sequenceLock(keys string) string {
	return `SELECT count(l.locked) AS n FROM (
    SELECT pg_advisory_xact_lock(k.key) AS locked FROM (
      SELECT DISTINCT hashtextextended('skiplock.sequence.{{s}}.' || q.k, 0) AS key
      FROM unnest(` + keys + `) AS q(k) WHERE q.k IS NOT NULL
      ORDER BY key
    ) AS k
  ) AS l`
}

// uniqueKeyExpr is the stored unique key of a job enqueued now with key and a period
// in microseconds: the key itself, or with a period the key and the number of the
// period (of the statement's clock, aligned to the Unix epoch) it falls in. It reads
// the statement's time from the CTE t.
func uniqueKeyExpr(key, periodUS string) string {
	return `CASE WHEN ` + key + ` IS NULL THEN NULL
            WHEN ` + periodUS + ` > 0 THEN ` + key + ` || '@' ||
              floor(extract(epoch FROM (SELECT now FROM t)) * 1000000 / ` + periodUS + `)::bigint::text
            ELSE ` + key + ` END`
}

// Deduplication: ON CONFLICT without a target skips a row that would violate any
// unique constraint — jobs_dedup_idx on the plain table, or the job_dedup table's key
// (kept by trigger) in partitioned mode, where a conflict target must name an index
// that includes the partition key. Ids are generated unique, so the primary key never
// conflicts. A unique job's row is skipped by its BEFORE INSERT trigger
// (jobs_unique_claim) when its key is held, which needs no ON CONFLICT.
//
// Each insert comes in four variants, so that every job pays only for the features it
// uses (docs/enqueue_cost.md):
//   - with sequence keys it first takes the sequences' advisory locks (sequenceLock);
//     without, it takes none (with the lock's CTE always present, every one-by-one
//     enqueue paid for it, and W1 measurably slowed);
//   - with a deduplication key it inserts with ON CONFLICT DO NOTHING; without, it
//     inserts plainly. ON CONFLICT makes every row a speculative insertion: a probe of
//     each unique index before the insert, a speculative token, and a WAL record to
//     confirm it (~50 bytes), paid by a job that can conflict with nothing;
//   - a single job with none of the three keys is inserted by insertPlainSQL, which
//     names only the columns such a job sets.

// onConflict is the clause a dedup variant adds.
func onConflict(dedup bool) string {
	if dedup {
		return "ON CONFLICT DO NOTHING\n"
	}
	return ""
}

// soloSetting is the transaction-local setting a solo insert (InsertParams.Solo: the
// statement's parameter param is true) makes before its row is written, and the condition (the WHEN of the jobs_lineage trigger,
// migration 0020) under which an insert statement records its lineage: a transaction
// that wrote one job and nothing else needs no tx_lineage row to be found from its
// job, and the row was a quarter of the WAL of a one-by-one enqueue
// (docs/enqueue_cost.md). The setting ends with its transaction, so it never reaches
// another on the same connection. The column is read by the insert's WHERE, so the
// planner cannot drop it.
func soloSetting(param string) string {
	return `CASE WHEN ` + param + `::bool THEN pg_catalog.set_config('skiplock.lineage', 'off', true) END AS solo`
}

// grouped is the value of jobs.grouped for a job of queue q (an expression): whether
// it enters jobs_group_ready_idx, the index of the limited claim's walk over a queue's
// (kind, concurrency key) groups. job_grouped (migration 0022) is a SQL function whose
// body the limits table's trigger rewrites whenever the limits change, so the planner
// inlines it: a constant false while no limit exists, a test of q against a literal
// list of the limited queues otherwise. No table is read per job, and a job of an
// unlimited queue writes no entry into the index (~112 B of WAL and ~5 µs of a
// one-by-one enqueue's server time: docs/enqueue_cost.md). A COPY writes the value
// CopyLaned read for its queues; writers that do not set the column (the SQL function
// enqueue, a user's INSERT) leave it at its default, true.
func grouped(q string) string {
	return `{{s}}.job_grouped(` + q + `)`
}

// fairIndexed is the value of jobs.fair_indexed for a job of queue q (an expression):
// whether it enters jobs_fair_idx, the index the fair claim reads a fair queue's jobs
// through (its walk over the keys and each key's range). job_fair (migration 0024) is
// a SQL function whose body the queues table's triggers rewrite whenever a queue's
// fairness changes, so the planner inlines it as grouped's: a constant false while no
// queue is fair, a test of q against a literal list of the fair queues otherwise. A
// job of a plain queue writes no entry into the index (~104 B of WAL per enqueue:
// docs/enqueue_cost.md). Writers that do not set the column (COPY, the SQL function
// enqueue, the Citus layout's inserts) leave it at its default, true.
func fairIndexed(q string) string {
	return `{{s}}.job_fair(` + q + `)`
}

// insertSQL is the one-job insert.
func insertSQL(sequence, dedup bool) string {
	lock, from := lockCTE(sequence, "ARRAY[$16::text]")
	return `
WITH ` + lock + `t AS (SELECT coalesce($1::timestamptz, now()) AS now, ` + notifyColumn + `, ` + soloSetting("$20") + from + `)
INSERT INTO {{s}}.jobs (queue, kind, payload, priority, run_at, max_attempts, deduplication_key, metadata,
                       unique_key, unique_states, sequence_key, sequence_skip_failed, tags, concurrency_key, created_at, updated_at,
                       grouped, fair_indexed)
SELECT $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, t.now + $7::bigint * interval '1 microsecond'), $8, $9, $12::jsonb,
       ` + uniqueKeyExpr("$13::text", "$14::bigint") + `, string_to_array($15::text, ',')::{{s}}.job_status[],
       $16::text, coalesce($17::bool, false), $18::text[], $19::text, t.now, t.now, ` + grouped("$2::text") + `, ` + fairIndexed("$2::text") + `
FROM t
WHERE t.notified >= 0 AND (t.solo IS NULL OR t.solo = 'off')
` + onConflict(dedup) + `RETURNING id`
}

// insertPlainSQL is the one-job insert of a job with no deduplication, unique or
// sequence key: most jobs. It writes only the columns such a job sets (the others keep
// their defaults, the values insertSQL would give them) and reads the clock once, so
// its CTE is inlined rather than materialised; the unique key's expression, the
// states' cast and six parameters are gone. With generic plans, as the client runs
// it, that is ~4 µs of the server's ~50 µs per insert (docs/enqueue_cost.md). The job's
// id comes from the client ($15, InsertParams.ID: a v7 UUID, as a COPY's ids) rather
// than from the column's default, the PL/pgSQL uuid_v7(), and nothing is returned: the server skips
// the function call and the RETURNING, the client a row to read (issue #49). Its
// parameters are insertSQL's up to $8, then $9 metadata, $10 and $11 the NOTIFY's
// (notifyColumn, at the same places as in insertSQL: queryInsert clears them), $12
// tags, $13 concurrency key, $14 solo, $15 id.
func insertPlainSQL() string {
	return `
WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now, ` + notifyColumn + `, ` + soloSetting("$14") + `)
INSERT INTO {{s}}.jobs (id, queue, kind, payload, priority, run_at, max_attempts, metadata, tags, concurrency_key, created_at, updated_at,
                       grouped, fair_indexed)
SELECT $15::uuid, $2, $3, $4::jsonb, $5, coalesce($6::timestamptz, t.now + $7::bigint * interval '1 microsecond'), $8, $9::jsonb,
       $12::text[], $13::text, t.now, t.now, ` + grouped("$2::text") + `, ` + fairIndexed("$2::text") + `
FROM t
WHERE t.notified >= 0 AND (t.solo IS NULL OR t.solo = 'off')`
}

// insertManySQL is the batch insert.
func insertManySQL(sequence, dedup bool) string {
	lock, from := lockCTE(sequence, "$16::text[]")
	return `
WITH ` + lock + `t AS MATERIALIZED (SELECT coalesce($1::timestamptz, now()) AS now, clock_timestamp() AS ts, ` + notifyColumn + from + `),
input AS MATERIALIZED (
  SELECT {{s}}.uuid_v7((SELECT ts FROM t), i.ord) AS id, i.*
  FROM unnest($2::text[], $3::text[], $4::jsonb[], $5::int[], $6::timestamptz[], $7::bigint[], $8::int[], $9::text[], $12::jsonb[],
              $13::text[], $14::bigint[], $15::text[], $16::text[], $17::bool[], $18::text[], $19::text[])
       WITH ORDINALITY AS i(queue, kind, payload, priority, run_at, delay_us, max_attempts, dedup, metadata,
                            ukey, uperiod_us, ustates, seq, seq_skip, tags, ckey, ord)
),
ins AS (
  INSERT INTO {{s}}.jobs (id, queue, kind, payload, priority, run_at, max_attempts, deduplication_key, metadata,
                          unique_key, unique_states, sequence_key, sequence_skip_failed, tags, concurrency_key,
                          created_at, updated_at, grouped, fair_indexed)
  SELECT input.id, queue, kind, payload, priority, coalesce(run_at, t.now + delay_us * interval '1 microsecond'),
         max_attempts, dedup, metadata, ` + uniqueKeyExpr("ukey", "uperiod_us") + `,
         string_to_array(ustates, ',')::{{s}}.job_status[], seq, coalesce(seq_skip, false),
         string_to_array(tags, E'\x1f'), ckey, t.now, t.now, ` + grouped("queue") + `, ` + fairIndexed("queue") + `
  FROM input, t
  WHERE t.notified >= 0
  ORDER BY ord
  ` + onConflict(dedup) + `  RETURNING id
)
SELECT input.id, ins.id IS NOT NULL FROM input LEFT JOIN ins ON ins.id = input.id ORDER BY input.ord`
}

// lockCTE returns the sequence-lock CTE (with its trailing comma) and the FROM clause
// that makes t wait for it, or nothing when sequence is false.
func lockCTE(sequence bool, keys string) (cte, from string) {
	if !sequence {
		return "", ""
	}
	return "lk AS MATERIALIZED (" + sequenceLock(keys) + "),\n", " FROM lk"
}

func newEnqueueStatements(b *builder) enqueueStatements {
	return enqueueStatements{
		insert: [2][2]stmt{
			{b.add("insert", insertSQL(false, false)), b.add("insert_dedup", insertSQL(false, true))},
			{b.add("insert_sequence", insertSQL(true, false)), b.add("insert_sequence_dedup", insertSQL(true, true))},
		},
		insertPlain: b.add("insert_plain", insertPlainSQL()),
		insertMany: [2][2]stmt{
			{b.add("insert_many", insertManySQL(false, false)), b.add("insert_many_dedup", insertManySQL(false, true))},
			{b.add("insert_many_sequence", insertManySQL(true, false)), b.add("insert_many_sequence_dedup", insertManySQL(true, true))},
		},

		uniqueHolders: b.addGuarded(planGuardOn, "unique_holders", uniqueHoldersSQL("")),
		dedupHolders:  b.addGuarded(planGuardOn, "dedup_holders", dedupHoldersSQL("")),

		// On Citus the same lookups name one concurrency_key ($5, $3), so that a holder
		// of another key — which holds the same key string for its own tenant, and never
		// conflicts with this insert — is never reported. Citus makes a router query of
		// them only under a custom plan (a generic plan of anything but a one-table
		// statement with the key equal to a parameter is "could not create distributed
		// plan"), so they run under planCitusCustom; they run only after an insert was
		// skipped.
		uniqueHoldersCitus: b.addCitus(planCitusCustom, "unique_holders_citus", uniqueHoldersSQL(" AND u.concurrency_key = $5::text")),
		dedupHoldersCitus:  b.addCitus(planCitusCustom, "dedup_holders_citus", dedupHoldersSQL(" AND j.concurrency_key = $3::text")),

		copyLanes: b.add("copy_lanes", copyLanesSQL),

		citus: newCitusInsertStatements(b),
	}
}

// InsertParams describe one job to insert.
type InsertParams struct {
	Queue       string
	Kind        string
	Payload     []byte
	Priority    int
	RunAt       *time.Time    // absolute; wins over Delay
	Delay       time.Duration // relative to the statement's now
	MaxAttempts int
	DedupKey    *string
	Metadata    []byte // a JSON object, or nil for none
	// Unique, when set, makes the job hold (Kind, UniqueKey) while its status is one
	// of UniqueStates (per UniquePeriod of the statement's clock when positive).
	UniqueKey    *string
	UniqueStates []string
	UniquePeriod time.Duration
	// SequenceKey, when set, runs the job after every earlier job of its sequence;
	// SequenceSkipFailed lets later jobs pass it should it fail.
	SequenceKey        *string
	SequenceSkipFailed bool
	// Tags label the job; nil for none. A tag holds no control character.
	Tags []string
	// ConcurrencyKey is the key limits partition by; "" for none.
	ConcurrencyKey string
	// ID, when set (a UUID in its canonical text form), is the id of a job inserted by
	// Insert without a deduplication, unique or sequence key (insertPlainSQL): the
	// caller makes it (the client: a v7 UUID, as for COPY), so that the server runs
	// no id default and the statement returns nothing. Otherwise, and by every other
	// statement, it is ignored and the column's default makes the id.
	ID *string
	// Solo says the insert is its transaction's only write (the client's own
	// transaction on its pool, not a caller's): it then writes no lineage row
	// (soloSetting), since the transaction's lineage is the job itself. Insert only;
	// a batch always records its lineage.
	Solo bool
}

// InsertResult tells whether a job was inserted, and its id (or the id of the job
// already holding the deduplication key).
type InsertResult struct {
	ID       string
	Inserted bool
}

// collectID reads the id an insert returned; pgx.ErrNoRows when its row was skipped.
func collectID(rows pgx.Rows, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
}

// plainArgs are insertPlainSQL's parameters for p. An absent value is an untyped nil
// and each number has its column's width, so that pgx encodes it without reflection
// or a conversion (~1 µs of the client's CPU per enqueue of 15 parameters).
func plainArgs(now *time.Time, p *InsertParams, ch any, qs []string) []any {
	args := []any{nil, p.Queue, p.Kind, string(p.Payload), int32(p.Priority), nil, micros(p.Delay), int32(p.MaxAttempts),
		nil, ch, nil, nil, p.ConcurrencyKey, p.Solo, *p.ID}
	if int(int32(p.Priority)) != p.Priority || int(int32(p.MaxAttempts)) != p.MaxAttempts {
		args[4], args[7] = p.Priority, p.MaxAttempts // out of int4's range: pgx refuses them
	}
	if now != nil {
		args[0] = now.UTC()
	}
	if p.RunAt != nil {
		args[5] = *p.RunAt
	}
	if p.Metadata != nil {
		args[8] = string(p.Metadata)
	}
	if qs != nil {
		args[10] = qs
	}
	if p.Tags != nil {
		args[11] = p.Tags
	}
	return args
}

// execPlain runs insertPlainSQL with args (plainArgs), as queryInsert would, but
// through Exec when its NOTIFY stays inside the statement: it returns no rows, so
// the client reads only the command tag.
func (s *Store) execPlain(ctx context.Context, db DBTX, n *Notify, args []any) error {
	if _, after := notifyAfter(db, n); after {
		_, err := queryInsert(ctx, s, db, n, collectOneInserted, s.enqueue.insertPlain.sql, args...)
		return err
	}
	tag, err := db.Exec(ctx, s.enqueue.insertPlain.sql, args...)
	if err != nil {
		return err
	}
	if n := tag.RowsAffected(); n != 1 {
		return fmt.Errorf("store: the insert wrote %d rows, want 1", n)
	}
	return nil
}

// collectOneInserted reads the command tag of an insert that returns no rows and
// must have written exactly one (insertPlainSQL).
func collectOneInserted(rows pgx.Rows, err error) (struct{}, error) {
	if err != nil {
		return struct{}{}, err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return struct{}{}, err
	}
	if n := rows.CommandTag().RowsAffected(); n != 1 {
		return struct{}{}, fmt.Errorf("store: the insert wrote %d rows, want 1", n)
	}
	return struct{}{}, nil
}

// insertRetries bounds how often an insert is repeated when its row was skipped for a
// key whose holder was gone by the time it was looked up (it finished and released a
// unique key, or a period ended): the key is then free, and the next insert takes it.
const insertRetries = 3

// ErrHolderVanished is returned when a job's key stayed held but its holder could not
// be found after insertRetries attempts (a pathological race); nothing was inserted.
var ErrHolderVanished = errors.New("store: the job holding the key changed while enqueueing; try again")

// Insert adds one job.
func (s *Store) Insert(ctx context.Context, db DBTX, now *time.Time, p InsertParams, n *Notify) (InsertResult, error) {
	ch, qs := n.args()
	citus, err := s.citusInsertSQLFor(ctx, db, &p, n) // "" but on the Citus layout
	if err != nil {
		return InsertResult{}, err
	}
	if p.DedupKey == nil && p.UniqueKey == nil && p.SequenceKey == nil {
		// No key that can skip the row: one statement, which always inserts.
		if citus != "" {
			id, err := queryInsert(ctx, s, db, n, collectID, citus, Now(now), p.Queue, p.Kind, string(p.Payload),
				p.Priority, p.RunAt, micros(p.Delay), p.MaxAttempts, jsonOrNil(p.Metadata), ch, qs, p.Tags, p.ConcurrencyKey, p.Solo)
			if err != nil {
				return InsertResult{}, err
			}
			return InsertResult{ID: id, Inserted: true}, nil
		}
		if p.ID != nil {
			if err := s.execPlain(ctx, db, n, plainArgs(now, &p, ch, qs)); err != nil {
				return InsertResult{}, err
			}
			return InsertResult{ID: *p.ID, Inserted: true}, nil
		}
		// Without an id from the caller, the general statement below: the column's
		// default makes the id, and the statement returns it.
	}
	ukey, uperiod, ustates := p.unique()
	for range insertRetries {
		q := s.enqueue.insert[b2i(p.SequenceKey != nil)][b2i(p.DedupKey != nil)].sql
		if citus != "" {
			q = citus
		}
		args := []any{Now(now), p.Queue, p.Kind, string(p.Payload), p.Priority,
			p.RunAt, micros(p.Delay), p.MaxAttempts, p.DedupKey, ch, qs, jsonOrNil(p.Metadata),
			ukey, uperiod, ustates, p.SequenceKey, p.SequenceSkipFailed, p.Tags, p.ConcurrencyKey, p.Solo}
		id, err := queryInsert(ctx, s, db, n, collectID, q, args...)
		if err == nil {
			return InsertResult{ID: id, Inserted: true}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return InsertResult{}, err
		}
		holders, err := s.holders(ctx, db, now, []InsertParams{p})
		if err != nil {
			return InsertResult{}, err
		}
		if holders[0] != "" {
			return InsertResult{ID: holders[0]}, nil
		}
	}
	return InsertResult{}, ErrHolderVanished
}

// b2i indexes the insert variants by a feature's use.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unique returns the statement parameters of p's uniqueness (NULLs when none).
func (p *InsertParams) unique() (key *string, periodUS int64, states *string) {
	if p.UniqueKey == nil {
		return nil, 0, nil
	}
	st := strings.Join(p.UniqueStates, ",")
	return p.UniqueKey, micros(p.UniquePeriod), &st
}

// InsertMany adds a batch in one statement; results are in input order.
func (s *Store) InsertMany(ctx context.Context, db DBTX, now *time.Time, ps []InsertParams, nt *Notify) ([]InsertResult, error) {
	out := make([]InsertResult, len(ps))
	todo := make([]int, len(ps)) // indexes of ps still to insert
	for i := range todo {
		todo[i] = i
	}
	for range insertRetries {
		batch := make([]InsertParams, len(todo))
		for j, i := range todo {
			batch[j] = ps[i]
		}
		res, err := s.insertMany(ctx, db, now, batch, nt)
		if err != nil {
			return nil, err
		}
		var skipped []int // indexes into batch
		for j, r := range res {
			out[todo[j]] = r
			if !r.Inserted {
				skipped = append(skipped, j)
			}
		}
		if len(skipped) == 0 {
			return out, nil
		}
		sp := make([]InsertParams, len(skipped))
		for k, j := range skipped {
			sp[k] = batch[j]
		}
		holders, err := s.holders(ctx, db, now, sp)
		if err != nil {
			return nil, err
		}
		var again []int
		for k, j := range skipped {
			if holders[k] == "" {
				again = append(again, todo[j])
				continue
			}
			out[todo[j]].ID = holders[k]
		}
		if len(again) == 0 {
			return out, nil
		}
		todo = again
	}
	return nil, ErrHolderVanished
}

func (s *Store) insertMany(ctx context.Context, db DBTX, now *time.Time, ps []InsertParams, nt *Notify) ([]InsertResult, error) {
	n := len(ps)
	queues, kinds, payloads := make([]string, n), make([]string, n), make([]string, n)
	prios, maxes := make([]int32, n), make([]int32, n)
	runAts, delays := make([]*time.Time, n), make([]int64, n)
	keys, metas := make([]*string, n), make([]*string, n)
	ukeys, uperiods, ustates := make([]*string, n), make([]int64, n), make([]*string, n)
	seqs, seqSkips, tags := make([]*string, n), make([]bool, n), make([]*string, n)
	ckeys := make([]string, n)
	for i := range ps {
		p := &ps[i]
		ckeys[i] = p.ConcurrencyKey
		queues[i], kinds[i], payloads[i] = p.Queue, p.Kind, string(p.Payload)
		prios[i], maxes[i] = int32(p.Priority), int32(p.MaxAttempts)
		runAts[i], delays[i], keys[i], metas[i] = p.RunAt, micros(p.Delay), p.DedupKey, jsonOrNil(p.Metadata)
		ukeys[i], uperiods[i], ustates[i] = p.unique()
		seqs[i], seqSkips[i] = p.SequenceKey, p.SequenceSkipFailed
		if p.Tags != nil {
			t := strings.Join(p.Tags, "\x1f") // tags hold no control characters
			tags[i] = &t
		}
	}
	ch, qs := nt.args()
	var seq, dedup bool
	for i := range ps {
		seq = seq || ps[i].SequenceKey != nil
		dedup = dedup || ps[i].DedupKey != nil
	}
	q := s.enqueue.insertMany[b2i(seq)][b2i(dedup)].sql
	args := []any{Now(now), queues, kinds, payloads, prios, runAts, delays, maxes, keys, ch, qs, metas,
		ukeys, uperiods, ustates, seqs, seqSkips, tags, ckeys}
	collect := func(rows pgx.Rows, err error) ([]InsertResult, error) {
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (InsertResult, error) {
			var ir InsertResult
			err := r.Scan(&ir.ID, &ir.Inserted)
			return ir, err
		})
	}
	out, err := queryInsert(ctx, s, db, nt, collect, q, args...)
	if err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("store: inserted %d results for %d jobs", len(out), n)
	}
	return out, nil
}

// jsonOrNil passes a JSON document as text, and nil as NULL.
func jsonOrNil(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}
