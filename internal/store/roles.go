package store

import (
	"fmt"
	"strings"

	"github.com/skiplock/skiplock/internal/ident"
)

// RoleNames name the five roles of a least-privilege deployment. An empty name
// leaves that role out.
type RoleNames struct {
	Migrator, Producer, Worker, Relay, Dashboard string
}

// RolesSQL returns the GRANT statements that give each role exactly what skiplock's
// statements need in this schema (see docs/roles.md for the reasoning).
func (s *Store) RolesSQL(n RoleNames) (string, error) {
	for what, name := range map[string]string{"migrator": n.Migrator, "producer": n.Producer, "worker": n.Worker,
		"relay": n.Relay, "dashboard": n.Dashboard} {
		if name != "" {
			if err := ident.Validate(what+" role", name); err != nil {
				return "", err
			}
		}
	}
	var b strings.Builder
	t := s.Table
	section := func(role, comment string, grants ...string) {
		if role == "" {
			return
		}
		r := ident.Quote(role)
		fmt.Fprintf(&b, "\n-- %s: %s\n", role, comment)
		fmt.Fprintf(&b, "GRANT USAGE ON SCHEMA %s TO %s;\n", s.q, r)
		for _, g := range grants {
			fmt.Fprintf(&b, "%s TO %s;\n", g, r)
		}
	}
	fmt.Fprintf(&b, "-- skiplock roles for schema %s. Create the roles first (CREATE ROLE … LOGIN PASSWORD …).\n", s.q)
	section(n.Migrator, "owns the schema's objects; runs migrations, `partitions enable` and partition maintenance.\n"+
		"-- Create the schema as this role (or ALTER SCHEMA … OWNER TO it) and run `skiplock migrate up` as it.",
		"GRANT CREATE ON SCHEMA "+s.q)
	section(n.Producer, "enqueues jobs and writes outbox events in the application's transactions; records inbox claims.",
		"GRANT INSERT ON "+t("jobs"),
		// RETURNING id, and finding the job that holds a deduplication key.
		"GRANT SELECT (id, kind, deduplication_key) ON "+t("jobs"),
		// The SQL enqueue function (migration 0005) is SECURITY INVOKER: it needs the two
		// grants above, and EXECUTE, which the migration revokes from PUBLIC.
		"GRANT EXECUTE ON FUNCTION "+t("enqueue")+"(text, jsonb, text, integer, timestamptz, integer, text)",
		"GRANT INSERT ON "+t("outbox"),
		"GRANT SELECT (id) ON "+t("outbox"),
		// Inbox.Claim inserts; Inbox.Prune selects FOR UPDATE (which needs UPDATE) and deletes.
		"GRANT SELECT, INSERT, DELETE, UPDATE (processed_at) ON "+t("inbox"),
		// Batches (docs/flows.md): opening one inserts it; adding members takes a KEY
		// SHARE lock on it, which needs an UPDATE privilege. The counting triggers and
		// batch_seal are SECURITY DEFINER.
		"GRANT SELECT, INSERT, UPDATE (sealed_at) ON "+t("batches"))
	section(n.Worker, "claims, heartbeats and finishes jobs; reclaims expired leases; deletes finished jobs (retention);\n"+
		"-- reads stats; pauses and resumes queues; sets limits; runs the periodic scheduler, which inserts the schedules' jobs.\n"+
		"-- It cannot change a payload, or touch the outbox beyond reading its health.",
		"GRANT SELECT, DELETE ON "+t("jobs"),
		"GRANT UPDATE (status, run_at, attempts, max_attempts, lease_until, lease_token, worker_id, last_error, updated_at,\n"+
			"  attempted_at, output, attempt_history, slot_of, slot_token, started) ON "+t("jobs"),
		"GRANT SELECT (id, created_at, published_at, dead_at) ON "+t("outbox"),
		// The retention service reads the partition settings (partition DDL itself
		// needs the owner: run `skiplock retention run` as the migrator).
		"GRANT SELECT ON "+t("partitioning"),
		// Start checks the schema's migrations; the claim reads whether its queue is
		// paused, and the operator's pause and resume write it.
		"GRANT SELECT ON "+t("schema_migrations"),
		"GRANT SELECT, INSERT, UPDATE ON "+t("queues"),
		// The scheduler writes the declared schedules (and deletes undeclared ones),
		// locks due ones FOR UPDATE, advances them and inserts their jobs through the
		// ordinary insert (SELECT on jobs covers RETURNING and the dedup lookup).
		"GRANT SELECT, INSERT, UPDATE, DELETE ON "+t("schedules"),
		// Lineage lookups (JobsByTx) and retention's pruning of the lineage table.
		"GRANT SELECT, DELETE ON "+t("tx_lineage"),
		// Every claim reads the limits; Config.Limits and the operator write them; a
		// limited claim logs its starts in the rate windows, which the sweeper prunes.
		"GRANT SELECT, INSERT, UPDATE, DELETE ON "+t("limits")+", "+t("limit_windows"),
		// A fair claim reads the weights and moves its queue's rotation; the operator
		// sets the weights (docs/fairness.md).
		"GRANT SELECT, INSERT, UPDATE, DELETE ON "+t("fair_weights")+", "+t("fair_rotation"),
		"GRANT INSERT ON "+t("jobs"),
		// Stats and batch listings read batches; a handler may open and add to one.
		"GRANT SELECT, INSERT, UPDATE (sealed_at) ON "+t("batches"),
		queueDepthGrant(t),
		// The SQL worker protocol (migration 0018, docs/sql_workers.md): SECURITY INVOKER
		// functions that need the grants above, and EXECUTE, revoked from PUBLIC.
		"GRANT EXECUTE ON FUNCTION "+strings.Join(sqlWorkerFunctions(t), ", "))
	section(n.Relay, "claims, publishes and marks outbox events; prunes published ones; requeues dead ones.",
		"GRANT SELECT, DELETE ON "+t("outbox"),
		"GRANT UPDATE (available_at, attempts, relay_until, relay_token, published_at, dead_at, last_error) ON "+t("outbox"))
	section(n.Dashboard, "reads everything, changes nothing (stats, job and outbox listings, metrics).",
		"GRANT SELECT ON "+strings.Join([]string{t("jobs"), t("outbox"), t("inbox"), t("job_dedup"), t("partitioning"),
			t("schema_migrations"), t("queues"), t("schedules"), t("tx_lineage"), t("limits"), t("limit_windows"), t("batches"),
			t("fair_weights"), t("fair_rotation")}, ", "),
		queueDepthGrant(t))
	return b.String(), nil
}

// queueDepthGrant lets a role that reads jobs run the queue_depth function (migration
// 0015, SECURITY INVOKER), whose EXECUTE the migration revokes from PUBLIC: an
// autoscaler's query, Client.Depth.
func queueDepthGrant(t func(string) string) string {
	return "GRANT EXECUTE ON FUNCTION " + t("queue_depth") + "(text, bigint, timestamptz)"
}

// sqlWorkerFunctions are the SQL worker protocol's functions (migration 0018), with
// their argument types, as GRANT names them.
func sqlWorkerFunctions(t func(string) string) []string {
	return []string{
		t("claim_jobs") + "(text, text, integer, interval, text[], timestamptz)",
		t("heartbeat_job") + "(uuid, uuid, interval, timestamptz)",
		t("finish_jobs") + "(uuid[], uuid[], text[], interval[], text[], jsonb[], timestamptz)",
		t("complete_job") + "(uuid, uuid, jsonb, boolean, timestamptz)",
		t("fail_job") + "(uuid, uuid, text, boolean, interval, timestamptz)",
		t("snooze_job") + "(uuid, uuid, interval, timestamptz)",
		t("cancel_job") + "(uuid, uuid, text, timestamptz)",
		t("reclaim_jobs") + "(text, integer, interval, timestamptz)",
	}
}
