package store

// The partitioned layout's statements: reading the layout, creating and dropping
// partitions. Converting an unpartitioned jobs table in place is in
// partitions_convert.go.
//
// Layout. jobs is range-partitioned by id. Ids are UUIDv7: their first 48 bits are the
// Unix milliseconds of the database's clock_timestamp() at insert, so a range of ids
// is a range of creation times, and
//   - the primary key (id) contains the partition key, so it stays a real, global
//     unique constraint, and every statement that finds a job by id (claim, heartbeat,
//     finish, reclaim, admin) is pruned to one partition;
//   - partition bounds are uuid_v7_floor(period start): jobs_p20300101 holds the ids
//     generated on 2030-01-01 (UTC), jobs_legacy the converted table (MINVALUE up to
//     the conversion's next period start), jobs_default anything else.
// Deduplication moves to job_dedup, kept by two triggers (see 0003).
//
// DDL takes no parameters, so bounds and names are spliced: names are validated and
// quoted, bounds are uuids this package formats itself.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/ident"
)

type partitionStatements struct {
	jobsRelkind, settings, dbClock, list, exists, blockers, releaseDedup, reloptions stmt
}

func newPartitionStatements(b *builder) partitionStatements {
	return partitionStatements{
		jobsRelkind: b.add("jobs_relkind", `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`),

		settings: b.add("partition_settings", `SELECT period, premake FROM {{s}}.partitioning WHERE table_name = 'jobs'`),

		dbClock: b.add("db_clock", `SELECT clock_timestamp()`),

		// Every partition of jobs with its bound, estimated rows and size.
		list: b.add("partition_list", `
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), greatest(c.reltuples, 0)::bigint,
       pg_total_relation_size(c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass
ORDER BY c.relname`),

		exists: b.add("partition_exists", "SELECT to_regclass($1) IS NOT NULL"),

		// What keeps the jobs with ids in [$1, $2) from being dropped: live jobs, and
		// finished jobs younger than their state's cutoff ($3..$5; NULL keeps that state
		// forever). Read through the parent, so the id range prunes to the partition and
		// each test is a partial-index probe.
		blockers: b.addGuarded(planGuardOn, "partition_blockers", `
SELECT (SELECT count(*) FROM {{s}}.jobs WHERE status = 'pending' AND id >= $1 AND id < $2),
       (SELECT count(*) FROM {{s}}.jobs WHERE status = 'running' AND id >= $1 AND id < $2),
       EXISTS (SELECT 1 FROM {{s}}.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND status = 'succeeded'
               AND updated_at >= coalesce($3::timestamptz, '-infinity') AND id >= $1 AND id < $2),
       EXISTS (SELECT 1 FROM {{s}}.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND status = 'failed'
               AND updated_at >= coalesce($4::timestamptz, '-infinity') AND id >= $1 AND id < $2),
       EXISTS (SELECT 1 FROM {{s}}.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND status = 'cancelled'
               AND updated_at >= coalesce($5::timestamptz, '-infinity') AND id >= $1 AND id < $2)`),

		releaseDedup: b.add("partition_release_dedup", `DELETE FROM {{s}}.job_dedup WHERE job_id >= $1 AND job_id < $2`),

		reloptions: b.add("partition_reloptions", `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`),
	}
}

// Layout names how the jobs table is stored.
type Layout string

// The layouts.
const (
	LayoutMissing     Layout = ""
	LayoutPlain       Layout = "plain"
	LayoutPartitioned Layout = "partitioned"
)

// Partition names of the partitioned layout.
const (
	LegacyPartition  = "jobs_legacy"
	DefaultPartition = "jobs_default"
)

// JobsLayout reports whether jobs is a plain or a partitioned table.
func (s *Store) JobsLayout(ctx context.Context, db DBTX) (Layout, error) {
	var k string
	if err := db.QueryRow(ctx, s.partition.jobsRelkind.sql, s.Table("jobs")).Scan(&k); err != nil {
		return LayoutMissing, err
	}
	switch k {
	case "r":
		return LayoutPlain, nil
	case "p":
		return LayoutPartitioned, nil
	case "":
		return LayoutMissing, nil
	}
	return LayoutMissing, fmt.Errorf("store: %s has unexpected relkind %q", s.Table("jobs"), k)
}

// PartitionSettings are the partition manager's settings.
type PartitionSettings struct {
	Period  string // "day" or "week"
	Premake int    // periods created ahead
}

// ReadPartitionSettings returns the settings, or nil when jobs is not partitioned.
func (s *Store) ReadPartitionSettings(ctx context.Context, db DBTX) (*PartitionSettings, error) {
	var p PartitionSettings
	err := db.QueryRow(ctx, s.partition.settings.sql).Scan(&p.Period, &p.Premake)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// DBClock returns the database's clock_timestamp(): the clock ids are generated
// from, and therefore the one partition bounds follow.
func (s *Store) DBClock(ctx context.Context, db DBTX) (time.Time, error) {
	var t time.Time
	err := db.QueryRow(ctx, s.partition.dbClock.sql).Scan(&t)
	return t, err
}

// Partition is one partition of jobs.
type Partition struct {
	Name string
	// From and To are the id bounds; From is MinUUID for a MINVALUE bound. Both are
	// empty for the default partition.
	From, To string
	Default  bool
	Rows     int64 // the planner's estimate (pg_class.reltuples)
	Bytes    int64 // heap, indexes and TOAST
}

// MinUUID sorts below every uuid.
const MinUUID = "00000000-0000-0000-0000-000000000000"

var boundRE = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'[0-9a-f-]{36}')\) TO \('([0-9a-f-]{36})'\)$`)

// ListPartitions returns jobs' partitions, by name.
func (s *Store) ListPartitions(ctx context.Context, db DBTX) ([]Partition, error) {
	rows, err := db.Query(ctx, s.partition.list.sql, s.Table("jobs"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var p Partition
		var bound string
		if err := rows.Scan(&p.Name, &bound, &p.Rows, &p.Bytes); err != nil {
			return nil, err
		}
		if bound == "DEFAULT" {
			p.Default = true
		} else {
			m := boundRE.FindStringSubmatch(bound)
			if m == nil {
				return nil, fmt.Errorf("store: partition %s has an unexpected bound %q", p.Name, bound)
			}
			p.From, p.To = strings.Trim(m[1], "'"), m[2]
			if m[1] == "MINVALUE" {
				p.From = MinUUID
			}
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// UUIDv7Floor returns the smallest UUIDv7 of t's millisecond, as uuid_v7_floor does.
func UUIDv7Floor(t time.Time) string {
	hi := uint64(t.UnixMilli())<<16 | 0x7000
	h := fmt.Sprintf("%016x", hi)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-0000-000000000000"
}

// UUIDv7Time returns the millisecond a UUIDv7 (or a bound) stands for.
func UUIDv7Time(id string) (time.Time, error) {
	h := strings.ReplaceAll(id, "-", "")
	if len(h) != 32 {
		return time.Time{}, fmt.Errorf("store: %q is not a uuid", id)
	}
	var ms int64
	if _, err := fmt.Sscanf(h[:12], "%x", &ms); err != nil {
		return time.Time{}, fmt.Errorf("store: %q is not a uuid: %w", id, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func uuidLiteral(u string) (string, error) {
	if !uuidRE.MatchString(u) {
		return "", fmt.Errorf("store: %q is not a lower-case uuid", u)
	}
	return "'" + u + "'", nil
}

var reloptRE = regexp.MustCompile(`^([a-z_.]+)=(.*)$`)

// storageOptions returns the WITH clause that gives a new table the storage options
// (autovacuum settings) of table like, or "" when like is "" or has none.
func (s *Store) storageOptions(ctx context.Context, db DBTX, like string) (string, error) {
	if like == "" {
		return "", nil
	}
	var opts []string
	if err := db.QueryRow(ctx, s.partition.reloptions.sql, s.Table(like)).Scan(&opts); err != nil {
		return "", fmt.Errorf("reading storage options of %s: %w", like, err)
	}
	var parts []string
	for _, o := range opts {
		m := reloptRE.FindStringSubmatch(o)
		if m == nil {
			continue
		}
		parts = append(parts, m[1]+" = '"+strings.ReplaceAll(m[2], "'", "''")+"'")
	}
	if len(parts) == 0 {
		return "", nil
	}
	return " WITH (" + strings.Join(parts, ", ") + ")", nil
}

// CreatePartition creates partition name of jobs for ids in [from, to), with the
// storage options (autovacuum settings) of the partition named like (if not empty),
// and returns whether it created it (false: it exists already).
func (s *Store) CreatePartition(ctx context.Context, db DBTX, name, from, to, like string) (bool, error) {
	if err := ident.Validate("partition", name); err != nil {
		return false, err
	}
	lo, err := uuidLiteral(from)
	if err != nil {
		return false, err
	}
	hi, err := uuidLiteral(to)
	if err != nil {
		return false, err
	}
	with, err := s.storageOptions(ctx, db, like)
	if err != nil {
		return false, err
	}
	var exists bool
	if err := db.QueryRow(ctx, s.partition.exists.sql, s.Table(name)).Scan(&exists); err != nil {
		return false, err
	}
	if exists {
		return false, nil
	}
	_, err = db.Exec(ctx, "CREATE TABLE "+s.Table(name)+" PARTITION OF "+s.Table("jobs")+
		" FOR VALUES FROM ("+lo+") TO ("+hi+")"+with)
	return err == nil, err
}

// Blockers say why a range of jobs cannot be dropped yet.
type Blockers struct {
	Pending, Running                         int64
	YoungSucceeded, YoungFailed, YoungCancel bool
}

// Blocked reports whether anything keeps the range.
func (b Blockers) Blocked() bool {
	return b.Pending > 0 || b.Running > 0 || b.YoungSucceeded || b.YoungFailed || b.YoungCancel
}

// RangeBlockers reports the live jobs with ids in [from, to) and whether any finished
// job there is younger than its state's cutoff (a nil cutoff keeps that state forever).
func (s *Store) RangeBlockers(ctx context.Context, db DBTX, from, to string, succeeded, failed, cancelled *time.Time) (Blockers, error) {
	return guardedRow(ctx, db, s.partition.blockers, func(r pgx.Row) (Blockers, error) {
		var b Blockers
		err := r.Scan(&b.Pending, &b.Running, &b.YoungSucceeded, &b.YoungFailed, &b.YoungCancel)
		return b, err
	}, from, to, Now(succeeded), Now(failed), Now(cancelled))
}

// LockJobs takes an ACCESS EXCLUSIVE lock on jobs for the rest of tx, waiting at most
// timeout (so a drop or conversion never queues everyone behind a long statement).
func (s *Store) LockJobs(ctx context.Context, tx pgx.Tx, timeout time.Duration) error {
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(timeout.Milliseconds(), 1))); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "LOCK TABLE "+s.Table("jobs")+" IN ACCESS EXCLUSIVE MODE")
	return err
}

// DropPartition releases the deduplication keys of the jobs in partition name (ids in
// [from, to)) and drops it. Call it in a transaction holding LockJobs, after checking
// RangeBlockers under that lock.
func (s *Store) DropPartition(ctx context.Context, tx pgx.Tx, name, from, to string) error {
	if err := ident.Validate("partition", name); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.partition.releaseDedup.sql, from, to); err != nil {
		return fmt.Errorf("releasing deduplication keys: %w", err)
	}
	_, err := tx.Exec(ctx, "DROP TABLE "+s.Table(name))
	return err
}
