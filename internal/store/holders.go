package store

// The holder lookups: for each job whose insert was skipped, the job holding its
// deduplication or unique key (on the Citus layout, per concurrency_key).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// uniqueHoldersSQL finds the job holding each unique key, the key computed as the
// insert did ($4 the statement time; at a period boundary it may name the next
// period, whose key nobody holds yet — the caller then inserts again). Each key probes
// the index with its own values (a lateral subquery, kept from being flattened into a
// join by OFFSET 0), so no statistics can make the plan read the table whole
// (planguard.go). The probe's conditions end with and (the Citus layout's key).
func uniqueHoldersSQL(and string) string {
	return `
WITH t AS (SELECT coalesce($4::timestamptz, now()) AS now)
SELECT k.kind, k.key, k.period_us, u.job_id
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS k(kind, key, period_us)
CROSS JOIN LATERAL (SELECT u.job_id FROM {{s}}.job_unique u
  WHERE u.kind = k.kind AND u.unique_key = ` + uniqueKeyExpr("k.key", "k.period_us") + and + ` OFFSET 0) u`
}

// dedupHoldersSQL finds the job holding each deduplication key, probed key by key as
// uniqueHoldersSQL does.
func dedupHoldersSQL(and string) string {
	return `
SELECT k.kind, k.key, j.id
FROM unnest($1::text[], $2::text[]) AS k(kind, key)
CROSS JOIN LATERAL (SELECT j.id FROM {{s}}.jobs j
  WHERE j.kind = k.kind AND j.deduplication_key = k.key` + and + ` OFFSET 0) j`
}

// holders returns, for each job whose insert was skipped, the id of the job holding
// its deduplication or unique key, or "" when no job holds it any more. On the Citus
// layout a key is held per concurrency_key, so the lookups run once per key of ps.
func (s *Store) holders(ctx context.Context, db DBTX, now *time.Time, ps []InsertParams) ([]string, error) {
	dist, err := s.Distributed(ctx, db)
	if err != nil {
		return nil, err
	}
	groups := map[string][]int{} // indexes of ps by the key their holder is looked up under
	var order []string
	for i := range ps {
		ck := ""
		if dist {
			ck = ps[i].ConcurrencyKey
		}
		if _, ok := groups[ck]; !ok {
			order = append(order, ck)
		}
		groups[ck] = append(groups[ck], i)
	}
	out := make([]string, len(ps))
	for _, ck := range order {
		var dk, dv, uk, uv []string
		var up []int64
		for _, i := range groups[ck] {
			p := &ps[i]
			switch {
			case p.DedupKey != nil:
				dk, dv = append(dk, p.Kind), append(dv, *p.DedupKey)
			case p.UniqueKey != nil:
				uk, uv, up = append(uk, p.Kind), append(uv, *p.UniqueKey), append(up, micros(p.UniquePeriod))
			}
		}
		var dedup, unique map[[2]string]string
		if len(dk) > 0 {
			if dedup, err = s.dedupHolders(ctx, db, dist, ck, dk, dv); err != nil {
				return nil, err
			}
		}
		if len(uk) > 0 {
			if unique, err = s.uniqueHolders(ctx, db, now, dist, ck, uk, uv, up); err != nil {
				return nil, err
			}
		}
		for _, i := range groups[ck] {
			p := &ps[i]
			switch {
			case p.DedupKey != nil:
				out[i] = dedup[[2]string{p.Kind, *p.DedupKey}]
			case p.UniqueKey != nil:
				out[i] = unique[[2]string{p.Kind, *p.UniqueKey}]
			}
		}
	}
	return out, nil
}

func (s *Store) uniqueHolders(ctx context.Context, db DBTX, now *time.Time, dist bool, ckey string, kinds, keys []string, periods []int64) (map[[2]string]string, error) {
	st, args := s.enqueue.uniqueHolders, []any{kinds, keys, periods, Now(now)}
	if dist {
		st, args = s.enqueue.uniqueHoldersCitus, append(args, ckey)
	}
	m, err := guarded(ctx, db, st, collectHolders(true), args...)
	if err != nil {
		return nil, fmt.Errorf("finding unique key holders: %w", err)
	}
	return m, nil
}

func (s *Store) dedupHolders(ctx context.Context, db DBTX, dist bool, ckey string, kinds, keys []string) (map[[2]string]string, error) {
	st, args := s.enqueue.dedupHolders, []any{kinds, keys}
	if dist {
		st, args = s.enqueue.dedupHoldersCitus, append(args, ckey)
	}
	m, err := guarded(ctx, db, st, collectHolders(false), args...)
	if err != nil {
		return nil, fmt.Errorf("finding deduplication key holders: %w", err)
	}
	return m, nil
}

// collectHolders reads holder rows (kind, key, [period,] holder id) into a map by
// (kind, key); period says the rows carry a unique key's period, which is skipped.
func collectHolders(period bool) func(pgx.Rows, error) (map[[2]string]string, error) {
	return func(rows pgx.Rows, err error) (map[[2]string]string, error) {
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		m := map[[2]string]string{}
		for rows.Next() {
			var k, v, id string
			var p int64
			dest := []any{&k, &v, &id}
			if period {
				dest = []any{&k, &v, &p, &id}
			}
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
			m[[2]string{k, v}] = id
		}
		return m, rows.Err()
	}
}
