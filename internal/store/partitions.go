package store

// The partitioned layout's statements: reading the layout, creating and dropping
// partitions, and converting an unpartitioned jobs table in place.
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

func init() { register(partitionQueries) }

var partitionQueries = map[string]string{
	"jobs_relkind": `SELECT coalesce((SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)), '')`,

	"partition_settings": `SELECT period, premake FROM {{s}}.partitioning WHERE table_name = 'jobs'`,

	"db_clock": `SELECT clock_timestamp()`,

	// Every partition of jobs with its bound, estimated rows and size.
	"partition_list": `
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), greatest(c.reltuples, 0)::bigint,
       pg_total_relation_size(c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass
ORDER BY c.relname`,

	// What keeps the jobs with ids in [$1, $2) from being dropped: live jobs, and
	// finished jobs younger than their state's cutoff ($3..$5; NULL keeps that state
	// forever). Read through the parent, so the id range prunes to the partition and
	// each test is a partial-index probe.
	"partition_blockers": `
SELECT (SELECT count(*) FROM {{s}}.jobs WHERE status = 'pending' AND id >= $1 AND id < $2),
       (SELECT count(*) FROM {{s}}.jobs WHERE status = 'running' AND id >= $1 AND id < $2),
       EXISTS (SELECT 1 FROM {{s}}.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND status = 'succeeded'
               AND updated_at >= coalesce($3::timestamptz, '-infinity') AND id >= $1 AND id < $2),
       EXISTS (SELECT 1 FROM {{s}}.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND status = 'failed'
               AND updated_at >= coalesce($4::timestamptz, '-infinity') AND id >= $1 AND id < $2),
       EXISTS (SELECT 1 FROM {{s}}.jobs WHERE status IN ('succeeded', 'failed', 'cancelled') AND status = 'cancelled'
               AND updated_at >= coalesce($5::timestamptz, '-infinity') AND id >= $1 AND id < $2)`,

	"partition_release_dedup": `DELETE FROM {{s}}.job_dedup WHERE job_id >= $1 AND job_id < $2`,

	"partition_reloptions": `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = $1::regclass`,

	"partition_register": `
INSERT INTO {{s}}.partitioning (table_name, period, premake) VALUES ('jobs', $1, $2)`,

	// The converted table's privileges, so the new parent can be given the same.
	"table_acl": `
SELECT coalesce(r.rolname, 'PUBLIC'), a.privilege_type, a.is_grantable
FROM pg_class c, aclexplode(c.relacl) AS a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE c.oid = $1::regclass AND a.grantee <> c.relowner`,

	"column_acl": `
SELECT coalesce(r.rolname, 'PUBLIC'), a.privilege_type, at.attname, a.is_grantable
FROM pg_attribute at, aclexplode(at.attacl) AS a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE at.attrelid = $1::regclass AND at.attacl IS NOT NULL
ORDER BY 1, 2, 3`,
}

// Layout names how the jobs table is stored.
type Layout string

// The layouts.
const (
	LayoutMissing     Layout = ""
	LayoutPlain       Layout = "plain"
	LayoutPartitioned Layout = "partitioned"
)

// JobsLayout reports whether jobs is a plain or a partitioned table.
func (s *Store) JobsLayout(ctx context.Context, db DBTX) (Layout, error) {
	var k string
	if err := db.QueryRow(ctx, s.sql["jobs_relkind"], s.Table("jobs")).Scan(&k); err != nil {
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
	err := db.QueryRow(ctx, s.sql["partition_settings"]).Scan(&p.Period, &p.Premake)
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
	err := db.QueryRow(ctx, s.sql["db_clock"]).Scan(&t)
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
	rows, err := db.Query(ctx, s.sql["partition_list"], s.Table("jobs"))
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
	with := ""
	if like != "" {
		var opts []string
		if err := db.QueryRow(ctx, s.sql["partition_reloptions"], s.Table(like)).Scan(&opts); err != nil {
			return false, fmt.Errorf("reading storage options of %s: %w", like, err)
		}
		var parts []string
		for _, o := range opts {
			m := reloptRE.FindStringSubmatch(o)
			if m == nil {
				continue
			}
			parts = append(parts, m[1]+" = '"+strings.ReplaceAll(m[2], "'", "''")+"'")
		}
		if len(parts) > 0 {
			with = " WITH (" + strings.Join(parts, ", ") + ")"
		}
	}
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.Table(name)).Scan(&exists); err != nil {
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
	var b Blockers
	err := db.QueryRow(ctx, s.sql["partition_blockers"], from, to, Now(succeeded), Now(failed), Now(cancelled)).
		Scan(&b.Pending, &b.Running, &b.YoungSucceeded, &b.YoungFailed, &b.YoungCancel)
	return b, err
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
	if _, err := tx.Exec(ctx, s.sql["partition_release_dedup"], from, to); err != nil {
		return fmt.Errorf("releasing deduplication keys: %w", err)
	}
	_, err := tx.Exec(ctx, "DROP TABLE "+s.Table(name))
	return err
}

// Partition names of the partitioned layout.
const (
	LegacyPartition  = "jobs_legacy"
	DefaultPartition = "jobs_default"
)

// ConvertParams describe a conversion to the partitioned layout.
type ConvertParams struct {
	Period  string // "day" or "week"
	Premake int
	// LegacyTo is the upper bound of the converted table (a period start after now).
	LegacyTo string
}

// ConvertToPartitioned turns the plain jobs table into the partitioned layout in tx,
// which must hold LockJobs: the table becomes partition jobs_legacy (ids below
// p.LegacyTo) of a new partitioned jobs with the same columns, constraints, indexes
// and privileges; its deduplication keys are copied to job_dedup (the only rows
// copied); a default partition and the triggers are created. It returns the number of
// deduplication keys copied. No job row moves, so the cost is one scan of the table
// (ATTACH PARTITION checks the bound) plus the key copy.
func (s *Store) ConvertToPartitioned(ctx context.Context, tx pgx.Tx, p ConvertParams) (int64, error) {
	to, err := uuidLiteral(p.LegacyTo)
	if err != nil {
		return 0, err
	}
	legacy := s.Table(LegacyPartition)
	acl, err := s.tableACL(ctx, tx)
	if err != nil {
		return 0, fmt.Errorf("reading privileges of jobs: %w", err)
	}
	steps := []string{
		`ALTER TABLE {{s}}.jobs RENAME TO jobs_legacy`,
		`ALTER TABLE {{s}}.jobs_legacy RENAME CONSTRAINT jobs_pkey TO jobs_legacy_pkey`,
		`ALTER INDEX {{s}}.jobs_ready_idx RENAME TO jobs_legacy_ready_idx`,
		`ALTER INDEX {{s}}.jobs_expired_lease_idx RENAME TO jobs_legacy_expired_lease_idx`,
		`ALTER INDEX {{s}}.jobs_retention_idx RENAME TO jobs_legacy_retention_idx`,
		`CREATE TABLE {{s}}.jobs (LIKE {{s}}.jobs_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)
		   PARTITION BY RANGE (id)`,
		`ALTER TABLE {{s}}.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id)`,
		// The same definitions as 0001, so ATTACH adopts the legacy table's indexes.
		`CREATE INDEX jobs_ready_idx ON {{s}}.jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'`,
		`CREATE INDEX jobs_expired_lease_idx ON {{s}}.jobs (lease_until) WHERE status = 'running'`,
		`CREATE INDEX jobs_retention_idx ON {{s}}.jobs (status, updated_at) WHERE status IN ('succeeded', 'failed', 'cancelled')`,
		// Finding the job that holds a key (the insert statements' follow-up query).
		`CREATE INDEX jobs_dedup_lookup_idx ON {{s}}.jobs (kind, deduplication_key) WHERE deduplication_key IS NOT NULL`,
		`ALTER TABLE {{s}}.jobs ATTACH PARTITION {{s}}.jobs_legacy FOR VALUES FROM (MINVALUE) TO (` + to + `)`,
		`CREATE TABLE {{s}}.jobs_default PARTITION OF {{s}}.jobs DEFAULT`,
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(st, "{{s}}", s.q)); err != nil {
			return 0, fmt.Errorf("%s: %w", firstLine(st), err)
		}
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+s.Table("job_dedup")+` (kind, deduplication_key, job_id)
SELECT kind, deduplication_key, id FROM `+legacy+` WHERE deduplication_key IS NOT NULL`)
	if err != nil {
		return 0, fmt.Errorf("copying deduplication keys: %w", err)
	}
	keys := tag.RowsAffected()
	tail := []string{
		// job_dedup enforces uniqueness from now on; the old index would only cost writes.
		`DROP INDEX {{s}}.jobs_dedup_idx`,
		`CREATE TRIGGER jobs_dedup_claim BEFORE INSERT ON {{s}}.jobs FOR EACH ROW
		   WHEN (NEW.deduplication_key IS NOT NULL) EXECUTE FUNCTION {{s}}.jobs_dedup_claim()`,
		`CREATE TRIGGER jobs_dedup_release AFTER DELETE ON {{s}}.jobs FOR EACH ROW
		   WHEN (OLD.deduplication_key IS NOT NULL) EXECUTE FUNCTION {{s}}.jobs_dedup_release()`,
	}
	for _, st := range tail {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(st, "{{s}}", s.q)); err != nil {
			return 0, fmt.Errorf("%s: %w", firstLine(st), err)
		}
	}
	for _, g := range acl {
		if _, err := tx.Exec(ctx, g); err != nil {
			return 0, fmt.Errorf("copying privileges (%s): %w", g, err)
		}
	}
	if _, err := tx.Exec(ctx, s.sql["partition_register"], p.Period, p.Premake); err != nil {
		return 0, fmt.Errorf("recording partition settings: %w", err)
	}
	return keys, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// tableACL returns GRANT statements that give a new jobs table the privileges the
// current one has (table and column privileges; the owner's are implicit).
func (s *Store) tableACL(ctx context.Context, db DBTX) ([]string, error) {
	grantee := func(r string) string {
		if r == "PUBLIC" {
			return r
		}
		return ident.Quote(r)
	}
	opt := func(g bool) string {
		if g {
			return " WITH GRANT OPTION"
		}
		return ""
	}
	var out []string
	rows, err := db.Query(ctx, s.sql["table_acl"], s.Table("jobs"))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var role, priv string
		var g bool
		if err := rows.Scan(&role, &priv, &g); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, "GRANT "+priv+" ON "+s.Table("jobs")+" TO "+grantee(role)+opt(g))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = db.Query(ctx, s.sql["column_acl"], s.Table("jobs"))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var role, priv, col string
		var g bool
		if err := rows.Scan(&role, &priv, &col, &g); err != nil {
			return nil, err
		}
		out = append(out, "GRANT "+priv+" ("+ident.Quote(col)+") ON "+s.Table("jobs")+" TO "+grantee(role)+opt(g))
	}
	return out, rows.Err()
}
