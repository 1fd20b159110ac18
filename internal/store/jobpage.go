package store

// The dashboard's job pages: a listing whose cost does not grow with the table, and
// the cheap per-state figures shown beside it.

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// pageStatements are the bounded job listings, one per direction, and the estimates
// of how many jobs each state holds.
type pageStatements struct {
	asc, desc, byTx, stateEstimates, countCapped stmt
}

// pageQuery builds a bounded listing in one direction. The inner query takes the
// filters an index can serve (state, tag) and the keyset cursor, in id order, and
// stops after $9 rows: the scan budget. The outer query keeps the rows that also
// match the filters no index serves (queue, kind, text, metadata) and, whatever it
// matched, the budget's last row, so the caller knows where the scan stopped and can
// continue from there (hit is never NULL: a job without a last error matches a text
// only by its payload). Row numbering over rows already in id order streams, so a
// page that fills early stops reading early.
//
// Written as the single listing was (every filter "$n IS NULL OR …" in one WHERE),
// a filter that matched nothing read the whole table: a text search for a state
// walked the primary key over every row.
func pageQuery(cmp, order string) string {
	f := jobFilters("j.", "$1", "$10", "$2", "$3", "$6", "$7", "$8")
	g := jobFilters("", "$1", "$10", "$2", "$3", "$6", "$7", "$8")
	return `
SELECT ` + prefixed("s") + `, s.hit, s.n FROM (
  SELECT j.*, row_number() OVER (ORDER BY j.id ` + order + `) AS n,
    coalesce(` + f.queue + ` AND ` + f.kind + ` AND ` + f.text + ` AND ` + f.metadata + `, false) AS hit
  FROM (
    SELECT * FROM {{s}}.jobs
    WHERE ` + g.states + ` AND ` + g.tag + `
      AND ($4::uuid IS NULL OR id ` + cmp + ` $4)
    ORDER BY id ` + order + `
    LIMIT $9
  ) j
) s
WHERE s.hit OR s.n = $9
ORDER BY s.id ` + order + `
LIMIT $5`
}

// filterSQL holds the predicates of a job listing's filters, each "param IS NULL OR
// …" so that an absent filter (NULL) folds away in a custom plan.
type filterSQL struct{ states, queue, kind, tag, text, metadata string }

// jobFilters returns the listing's predicates on the columns of alias (with its
// dot, or "") for the given parameters: the states (an array of the job_status
// type) and whether a running job's handler started (NULL: either; see
// ListParams.statusArgs), queue, kind, tag, text (in the payload or last error,
// case-insensitive) and metadata (a JSON object the job's must contain).
func jobFilters(alias, states, started, queue, kind, tag, text, metadata string) filterSQL {
	return filterSQL{
		states: "(" + states + "::{{s}}.job_status[] IS NULL OR " + alias + "status = ANY(" + states + "))" +
			" AND (" + started + "::boolean IS NULL OR " + alias + "status <> 'running' OR " + alias + "started = " + started + ")",
		queue:    "(" + queue + "::text IS NULL OR " + alias + "queue = " + queue + ")",
		kind:     "(" + kind + "::text IS NULL OR " + alias + "kind = " + kind + ")",
		tag:      "(" + tag + "::text IS NULL OR " + alias + "tags @> ARRAY[" + tag + "::text])",
		text:     "(" + text + "::text IS NULL OR strpos(lower(" + alias + "payload::text), lower(" + text + ")) > 0 OR strpos(lower(" + alias + "last_error), lower(" + text + ")) > 0)",
		metadata: "(" + metadata + "::jsonb IS NULL OR " + alias + "metadata @> " + metadata + "::jsonb)",
	}
}

// all joins every predicate with AND.
func (f filterSQL) all() string {
	return strings.Join([]string{f.states, f.queue, f.kind, f.tag, f.text, f.metadata}, "\n  AND ")
}

func newPageStatements(b *builder) pageStatements {
	return pageStatements{
		asc:  b.addGuarded(planCustom, "list_page_asc", pageQuery(">", "ASC")),
		desc: b.addGuarded(planCustom, "list_page_desc", pageQuery("<", "DESC")),

		// How many jobs match the listing's filters, counted up to $7, and the greatest
		// id among them: a bulk action's confirmation. Ids only and in no order, so the
		// planner may count from a state's or tag's index without sorting (the text form of a
		// uuid sorts as the uuid: PostgreSQL 15 has no max(uuid)); the greatest
		// id bounds the action only when the count is below the cap (every match seen).
		countCapped: b.addGuarded(planCustom, "count_jobs_capped", `
SELECT count(*), coalesce(max(id::text), '') FROM (
  SELECT id FROM {{s}}.jobs
  WHERE `+jobFilters("", "$1", "$8", "$2", "$3", "$4", "$5", "$6").all()+`
  LIMIT $7) AS x`),

		// One page of the jobs one transaction wrote, by id after the cursor: the
		// lineage index's range, then the jobs by primary key.
		byTx: b.addGuarded(planGuardOn, "jobs_by_tx_page", `
SELECT `+jobColumns+` FROM {{s}}.jobs
WHERE id = ANY(ARRAY(
  SELECT l.id FROM (`+lineageJobIDs+`) AS l(id)
  WHERE $2::uuid IS NULL OR l.id > $2
  ORDER BY l.id LIMIT $3))
ORDER BY id`),

		// The planner's own estimate of the jobs in each state: the table's row count
		// (pg_class.reltuples) times the status column's most common values' shares
		// (pg_stats, as ANALYZE last saw them). Two catalog rows, whatever the table's size.
		// A partitioned table's statistics are those of the whole hierarchy (inherited).
		stateEstimates: b.add("job_state_estimates", `
SELECT v.status, (c.reltuples * v.freq)::bigint
FROM pg_class c
CROSS JOIN LATERAL (
  SELECT st.most_common_vals::text::text[] AS vals, st.most_common_freqs AS freqs
  FROM pg_stats st
  WHERE st.schemaname = $1 AND st.tablename = 'jobs' AND st.attname = 'status'
  ORDER BY st.inherited DESC LIMIT 1) m
CROSS JOIN LATERAL unnest(m.vals, m.freqs) AS v(status, freq)
WHERE c.oid = ($2::text)::regclass AND c.reltuples > 0`),
	}
}

// PageRow is one row of a bounded listing: a job, and whether it matched every filter
// (a row that did not is the scan budget's last row, returned to say where the scan
// stopped).
type PageRow struct {
	Job *Job
	Hit bool
	// Last reports that this row was the scan budget's last: the listing examined no
	// further.
	Last bool
}

// ListPage returns at most p.Limit rows of the jobs after p.AfterID (a cursor, in the
// listing's direction: newest first when desc), examining at most budget jobs that
// the state and tag filters leave. See pageQuery.
func (s *Store) ListPage(ctx context.Context, db DBTX, p ListParams, desc bool, budget int) ([]PageRow, error) {
	st := s.pages.asc
	if desc {
		st = s.pages.desc
	}
	statuses, started := p.statusArgs()
	var hits []bool
	var ns []int64
	jobs, err := guarded(ctx, db, st, func(rows pgx.Rows, err error) ([]*Job, error) {
		return collectJobRows(rows, err, func(d []any, j *Job) []any {
			hits, ns = append(hits, false), append(ns, 0)
			return append(d, &hits[len(hits)-1], &ns[len(ns)-1])
		})
	}, statuses, nullable(p.Queue), nullable(p.Kind), nullable(p.AfterID), p.Limit,
		nullable(p.Tag), nullable(p.Search), jsonOrNil(p.Metadata), budget, started)
	if err != nil {
		return nil, err
	}
	out := make([]PageRow, len(jobs))
	for i, j := range jobs {
		out[i] = PageRow{Job: j, Hit: hits[i], Last: ns[i] == int64(budget)}
	}
	return out, nil
}

// CountCapped counts the jobs matching p's filters (not its cursor or limit), up to
// limit, and returns the count and the greatest id among them.
func (s *Store) CountCapped(ctx context.Context, db DBTX, p ListParams, limit int) (n int64, maxID string, err error) {
	statuses, started := p.statusArgs()
	_, err = guarded(ctx, db, s.pages.countCapped, func(rows pgx.Rows, err error) (struct{}, error) {
		if err != nil {
			return struct{}{}, err
		}
		_, err = pgx.ForEachRow(rows, []any{&n, &maxID}, func() error { return nil })
		return struct{}{}, err
	}, statuses, nullable(p.Queue), nullable(p.Kind), nullable(p.Tag), nullable(p.Search), jsonOrNil(p.Metadata), limit, started)
	return n, maxID, err
}

// JobsByTxPage returns up to limit jobs the transaction txid wrote, by id after
// afterID ("" for the first page).
func (s *Store) JobsByTxPage(ctx context.Context, db DBTX, txid int64, afterID string, limit int) ([]*Job, error) {
	return guarded(ctx, db, s.pages.byTx, CollectJobs, txid, nullable(afterID), limit)
}

// StateEstimates returns the planner's estimate of the jobs in each state (states
// too rare for the statistics to list are absent). Empty before the table was first
// analysed.
func (s *Store) StateEstimates(ctx context.Context, db DBTX) (map[string]int64, error) {
	rows, err := db.Query(ctx, s.pages.stateEstimates.sql, s.Schema, s.Table("jobs"))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var st string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[strings.TrimSpace(st)] = n
		return nil
	})
	return out, err
}
