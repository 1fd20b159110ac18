package store

// The vacuum horizon. VACUUM removes a dead tuple only once no snapshot can still see
// it; the oldest snapshot or transaction id still open in the database — a session
// idle in a transaction, a long report, a prepared transaction, a replication slot's
// xmin — is the horizon. While one is held, every job claimed or finished since
// leaves a tuple nobody can remove (W10 in docs/benchmarks.md), so the operator needs
// to know what holds it, and for how long.
//
// Time here is the database's now(), not the injected clock: the holder's
// transaction start is PostgreSQL's own record of its session, and only PostgreSQL's
// clock measures against it. (The watcher that warns about a held horizon,
// internal/maint/horizon.go, measures how long it has seen the same holder with the
// client's clock.)
//
// Privileges. backend_xmin and backend_xid of every session are visible to any role;
// a session's state and transaction start are visible only to its own role, a role
// with pg_read_all_stats (pg_monitor has it), or a superuser. Without them State is
// empty and HeldFor unknown, but the holder and its age in transactions are not.

import (
	"context"
	"time"
)

// Kinds of horizon holders.
const (
	HolderSession  = "session"
	HolderPrepared = "prepared transaction"
	HolderSlot     = "replication slot"
)

// horizonSQL returns the oldest holder of the database's vacuum horizon, and the jobs
// table's dead tuples ($1: the jobs table; all its partitions are summed — a plain
// table is no partition tree, so it is matched by itself).
//
// Sessions are those of this database, and walsenders, whose standby may report its
// xmin (hot_standby_feedback; a walsender's type is visible only with
// pg_read_all_stats). Left out: other processes without a database (the logical
// replication launcher holds a snapshot for moments), processes without a role
// (autovacuum workers), sessions running a plain VACUUM — PostgreSQL leaves their
// snapshots out of the horizon — and this session. A session's xid age is the older
// of its snapshot's xmin and its own xid.
const horizonSQL = `
WITH h AS (
  SELECT 'session' AS kind, a.pid, coalesce(a.application_name, '') AS name, coalesce(a.state, '') AS state,
         greatest(age(a.backend_xmin), age(a.backend_xid)) AS xid_age,
         CASE WHEN a.backend_xid IS NULL OR age(a.backend_xmin) > age(a.backend_xid)
              THEN a.backend_xmin ELSE a.backend_xid END::text::bigint AS xid,
         a.xact_start AS since
  FROM pg_stat_activity a
  WHERE (a.datid = (SELECT oid FROM pg_database WHERE datname = current_database()) OR a.backend_type = 'walsender')
    AND a.pid <> pg_backend_pid()
    AND a.usesysid IS NOT NULL
    AND a.pid NOT IN (SELECT pid FROM pg_stat_progress_vacuum)
    AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
  UNION ALL
  SELECT 'prepared transaction', 0, p.gid, '', age(p.transaction), p.transaction::text::bigint, p.prepared
  FROM pg_prepared_xacts p
  WHERE p.database = current_database()
  UNION ALL
  SELECT 'replication slot', 0, r.slot_name::text, CASE WHEN r.active THEN 'active' ELSE 'inactive' END,
         age(r.xmin), r.xmin::text::bigint, NULL
  FROM pg_replication_slots r
  WHERE r.xmin IS NOT NULL AND (r.database IS NULL OR r.database = current_database())
)
SELECT d.dead, h.kind, h.pid, h.name, h.state, h.xid_age, h.xid,
       extract(epoch FROM now() - h.since)::float8
FROM (SELECT coalesce(sum(n_dead_tup), 0)::bigint AS dead FROM pg_stat_all_tables
      WHERE relid = $1::regclass OR relid IN (SELECT relid FROM pg_partition_tree($1::regclass))) d
LEFT JOIN LATERAL (SELECT * FROM h ORDER BY xid_age DESC LIMIT 1) h ON true`

// Horizon describes the oldest holder of the database's vacuum horizon.
type Horizon struct {
	Kind  string // HolderSession, HolderPrepared, HolderSlot; "" when nothing holds it
	PID   int    // the session's process id; 0 for the other kinds
	Name  string // application_name, the prepared transaction's gid, or the slot's name
	State string // the session's state ("" when the role may not see it); a slot's "active"/"inactive"
	// XIDAge is how many transaction ids were assigned since the holder's snapshot or
	// transaction began.
	XIDAge int64
	// XID is the holding transaction id (the snapshot's xmin or the transaction's own
	// xid, whichever is older): with Kind, PID and Name it names one holding.
	XID int64
	// HeldFor is how long the holder's transaction has been open by the database's
	// clock; known is false for a slot and for another role's session that the
	// connected role may not see.
	HeldFor time.Duration
	Known   bool
	// DeadJobTuples is PostgreSQL's estimate of the dead tuples in jobs (all
	// partitions): what the horizon keeps vacuum from removing shows up here.
	DeadJobTuples int64
}

// Horizon returns the oldest holder of the database's vacuum horizon.
func (s *Store) Horizon(ctx context.Context, db DBTX) (Horizon, error) {
	var h Horizon
	var kind, name, state *string
	var pid *int32
	var age, xid *int64
	var held *float64
	err := db.QueryRow(ctx, s.stats.horizon.sql, s.Table("jobs")).
		Scan(&h.DeadJobTuples, &kind, &pid, &name, &state, &age, &xid, &held)
	if err != nil || kind == nil {
		return h, err
	}
	h.Kind, h.Name, h.State = *kind, deref(name), deref(state)
	if pid != nil {
		h.PID = int(*pid)
	}
	if age != nil {
		h.XIDAge = *age
	}
	if xid != nil {
		h.XID = *xid
	}
	if held != nil {
		h.HeldFor, h.Known = secondsDuration(*held), true
	}
	return h, nil
}
