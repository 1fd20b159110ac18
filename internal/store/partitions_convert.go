package store

// Converting the plain jobs table into the partitioned layout in place (see
// partitions.go for the layout).

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/ident"
)

type convertStatements struct {
	register, tableACL, columnACL, copyDedup stmt
}

func newConvertStatements(b *builder) convertStatements {
	return convertStatements{
		register: b.add("partition_register", `
INSERT INTO {{s}}.partitioning (table_name, period, premake) VALUES ('jobs', $1, $2)`),

		// The converted table's privileges, so the new parent can be given the same.
		tableACL: b.add("table_acl", `
SELECT coalesce(r.rolname, 'PUBLIC'), a.privilege_type, a.is_grantable
FROM pg_class c, aclexplode(c.relacl) AS a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE c.oid = $1::regclass AND a.grantee <> c.relowner`),

		columnACL: b.add("column_acl", `
SELECT coalesce(r.rolname, 'PUBLIC'), a.privilege_type, at.attname, a.is_grantable
FROM pg_attribute at, aclexplode(at.attacl) AS a
LEFT JOIN pg_roles r ON r.oid = a.grantee
WHERE at.attrelid = $1::regclass AND at.attacl IS NOT NULL
ORDER BY 1, 2, 3`),

		// The converted table's deduplication keys, the only rows the conversion copies.
		// It reads jobs_legacy, which exists only once jobs has been renamed to it, so it
		// is valid (and prepared by the tests) in the partitioned layout only.
		copyDedup: b.addFor(LayoutPartitioned, "partition_copy_dedup", `INSERT INTO `+b.table("job_dedup")+` (kind, deduplication_key, job_id)
SELECT kind, deduplication_key, id FROM `+b.table(LegacyPartition)+` WHERE deduplication_key IS NOT NULL`),
	}
}

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
	acl, err := s.tableACL(ctx, tx)
	if err != nil {
		return 0, fmt.Errorf("reading privileges of jobs: %w", err)
	}
	with, err := s.storageOptions(ctx, tx, "jobs")
	if err != nil {
		return 0, err
	}
	steps := []string{
		`ALTER TABLE {{s}}.jobs RENAME TO jobs_legacy`,
		`ALTER TABLE {{s}}.jobs_legacy RENAME CONSTRAINT jobs_pkey TO jobs_legacy_pkey`,
		`ALTER INDEX {{s}}.jobs_ready_idx RENAME TO jobs_legacy_ready_idx`,
		`ALTER INDEX {{s}}.jobs_expired_lease_idx RENAME TO jobs_legacy_expired_lease_idx`,
		`ALTER INDEX {{s}}.jobs_retention_idx RENAME TO jobs_legacy_retention_idx`,
		`ALTER INDEX {{s}}.jobs_sequence_idx RENAME TO jobs_legacy_sequence_idx`,
		`ALTER INDEX {{s}}.jobs_tags_idx RENAME TO jobs_legacy_tags_idx`,
		`ALTER INDEX {{s}}.jobs_group_ready_idx RENAME TO jobs_legacy_group_ready_idx`,
		`ALTER INDEX {{s}}.jobs_parent_idx RENAME TO jobs_legacy_parent_idx`,
		`ALTER INDEX {{s}}.jobs_batch_idx RENAME TO jobs_legacy_batch_idx`,
		`ALTER INDEX {{s}}.jobs_waiting_idx RENAME TO jobs_legacy_waiting_idx`,
		`ALTER INDEX {{s}}.jobs_slot_of_idx RENAME TO jobs_legacy_slot_of_idx`,
		`ALTER INDEX {{s}}.jobs_fair_idx RENAME TO jobs_legacy_fair_idx`,
		`CREATE TABLE {{s}}.jobs (LIKE {{s}}.jobs_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS)
		   PARTITION BY RANGE (id)`,
		`ALTER TABLE {{s}}.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id)`,
		// The same definitions as 0001, so ATTACH adopts the legacy table's indexes.
		`CREATE INDEX jobs_ready_idx ON {{s}}.jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'`,
		`CREATE INDEX jobs_expired_lease_idx ON {{s}}.jobs (lease_until) WHERE status = 'running'`,
		`CREATE INDEX jobs_retention_idx ON {{s}}.jobs (status, updated_at) WHERE status IN ('succeeded', 'failed', 'cancelled')`,
		`CREATE INDEX jobs_sequence_idx ON {{s}}.jobs (sequence_key, id)
		   WHERE sequence_key IS NOT NULL AND status IN ('pending', 'running', 'failed')`,
		`CREATE INDEX jobs_tags_idx ON {{s}}.jobs USING gin (tags) WHERE tags IS NOT NULL`,
		`CREATE INDEX jobs_group_ready_idx ON {{s}}.jobs (queue, kind, concurrency_key, priority DESC, run_at, id)
		   WHERE status = 'pending' AND grouped`,
		`CREATE INDEX jobs_parent_idx ON {{s}}.jobs (parent_id) WHERE parent_id IS NOT NULL`,
		`CREATE INDEX jobs_batch_idx ON {{s}}.jobs (batch_id) WHERE batch_id IS NOT NULL`,
		`CREATE INDEX jobs_waiting_idx ON {{s}}.jobs (queue) WHERE status > 'cancelled'`,
		`CREATE INDEX jobs_slot_of_idx ON {{s}}.jobs (slot_of) WHERE slot_of IS NOT NULL AND status = 'running'`,
		`CREATE INDEX jobs_fair_idx ON {{s}}.jobs (queue, concurrency_key, priority DESC, run_at, id)
		   WHERE status = 'pending' AND fair_indexed`,
		// Finding the job that holds a key (the insert statements' follow-up query).
		`CREATE INDEX jobs_dedup_lookup_idx ON {{s}}.jobs (kind, deduplication_key) WHERE deduplication_key IS NOT NULL`,
		`ALTER TABLE {{s}}.jobs ATTACH PARTITION {{s}}.jobs_legacy FOR VALUES FROM (MINVALUE) TO (` + to + `)`,
		// With the legacy table's storage options (an operator's autovacuum settings),
		// as the partition manager gives every partition it creates.
		`CREATE TABLE {{s}}.jobs_default PARTITION OF {{s}}.jobs DEFAULT` + with,
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(st, "{{s}}", s.q)); err != nil {
			return 0, fmt.Errorf("%s: %w", firstLine(st), err)
		}
	}
	tag, err := tx.Exec(ctx, s.convert.copyDedup.sql)
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
		// The unique-key triggers (migration 0009) move from the legacy table to the
		// new parent, which clones them to every partition.
		`SELECT {{s}}.install_unique_triggers()`,
		`SELECT {{s}}.install_lineage_trigger()`,
		`SELECT {{s}}.install_flow_triggers()`,
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
	if _, err := tx.Exec(ctx, s.convert.register.sql, p.Period, p.Premake); err != nil {
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
	rows, err := db.Query(ctx, s.convert.tableACL.sql, s.Table("jobs"))
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
	rows, err = db.Query(ctx, s.convert.columnACL.sql, s.Table("jobs"))
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
