// Package store holds every SQL statement skiplock runs against its tables. No
// other package writes SQL for jobs, the outbox or the inbox.
//
// Each statement is built once per schema (the schema name is validated and quoted
// when the Store is created) and takes time from a parameter: a nil *time.Time means
// "the database's now()", a non-nil one is an injected clock's reading. That is what
// lets tests expire leases and schedule retries without sleeping.
//
// Every write that finishes a claimed job is conditional on the row still being
// 'running' under the caller's lease token; the statements report which rows they
// changed so callers can tell a lost lease from success. The schema's CHECK
// constraint jobs_lease_iff_running makes "lease_token = $token" imply
// "status = 'running'", so the fenced statements match on (id, lease_token): the
// planner then always reaches rows through the primary key, never by scanning the
// running-jobs index (whose dead entries pile up between vacuums).
//
// # Statements
//
// Statements are typed fields, one group per table or area, each declared next to
// the methods that run it (enqueue.go, holders.go, lease.go, finish.go, reclaim.go, job.go,
// outbox.go, inbox.go, partitions.go, partitions_convert.go, stats.go, retention.go,
// notify.go, service.go, jobpage.go, benchfill.go, depth.go, fairclaim.go (its statements; fairclaim_run.go runs them, fairsettings.go), citus.go, citusclaim.go, citusoutbox.go). A misspelt statement is a compile error, and running one
// reads a field rather than looking a name up. They are Go string constants rather
// than embedded .sql files because many are composed from shared fragments (column
// lists, the fenced finish UPDATE, the claim template and its ordered predicate, the
// NOTIFY and async-commit columns) and because the comments recording why a
// statement is written the way it is (measured plans) belong right beside it.
//
// Every statement goes through builder.add, which substitutes the quoted schema for
// {{s}} and records it. TestPrepareEveryStatement walks the Store's fields by
// reflection and prepares and plans each one against a migrated schema in both the
// plain and the partitioned layout, so a new statement is tested without anyone
// listing it, and a field that bypasses add fails the test.
//
// DDL (partition creation and dropping, the layout conversion, LOCK TABLE, LISTEN)
// is composed at call time: it takes no parameters, so names and bounds are spliced
// (validated and quoted), and it cannot be prepared.
package store

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/ident"
)

// DBTX is what the store runs statements on: pgx.Tx, *pgx.Conn, *pgxpool.Pool, or the
// database/sql adapter in the root package.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store builds and runs the statements for one schema.
type Store struct {
	Schema string // unquoted
	q      string // quoted

	enqueue   enqueueStatements
	notify    notifyStatements
	lease     leaseStatements
	finish    finishStatements
	reclaim   reclaimStatements
	jobs      jobStatements
	outbox    outboxStatements
	inbox     inboxStatements
	partition partitionStatements
	convert   convertStatements
	stats     statsStatements
	retention retentionStatements
	service   serviceStatements
	queues    queueStatements
	schedules scheduleStatements
	limits    limitStatements
	flows     flowStatements
	batches   batchStatements
	pages     pageStatements
	bench     benchStatements
	depth     depthStatements
	fair      fairStatements
	citus     citusStatements
	citusWork citusWorkStatements
	citusOut  citusOutboxStatements
	citusRet  citusRetentionStatements

	layout layoutState // Distributed's answer, once known
	// outboxCursor is the key the relay's last claim on the Citus layout stopped at;
	// citusCursors those of the manual claims, per queue (cituswalk.go).
	outboxCursor CitusCursor
	citusCursors sync.Map

	all []stmt // every statement, as builder.add recorded them (SQL and the tests)
}

// New returns a Store for schema, or an *ident.Error if the name is unsafe.
func New(schema string) (*Store, error) {
	if err := ident.Validate("schema", schema); err != nil {
		return nil, err
	}
	s := &Store{}
	b := &builder{q: ident.Quote(schema), store: s}
	*s = Store{
		Schema:    schema,
		q:         b.q,
		enqueue:   newEnqueueStatements(b),
		notify:    newNotifyStatements(b),
		lease:     newLeaseStatements(b),
		finish:    newFinishStatements(b),
		reclaim:   newReclaimStatements(b),
		jobs:      newJobStatements(b),
		outbox:    newOutboxStatements(b),
		inbox:     newInboxStatements(b),
		partition: newPartitionStatements(b),
		convert:   newConvertStatements(b),
		stats:     newStatsStatements(b),
		retention: newRetentionStatements(b),
		service:   newServiceStatements(b),
		queues:    newQueueStatements(b),
		schedules: newScheduleStatements(b),
		limits:    newLimitStatements(b),
		flows:     newFlowStatements(b),
		batches:   newBatchStatements(b),
		pages:     newPageStatements(b),
		bench:     newBenchStatements(b),
		depth:     newDepthStatements(b),
		fair:      newFairStatements(b),
		citus:     newCitusStatements(b),
		citusWork: newCitusWorkStatements(b),
		citusOut:  newCitusOutboxStatements(b),
		citusRet:  newCitusRetentionStatements(b),
	}
	s.all = b.all
	return s, nil
}

// stmt is one statement, its text built for the store's schema.
type stmt struct {
	name string // what SQL(name) knows it by
	sql  string
	// layout is the only layout the statement is valid in; LayoutMissing: both.
	layout Layout
	// guard is the plan guard it runs under (planguard.go), "" for none. guarded
	// applies it, and TestEveryStatementPlansBounded plans the statement with it.
	guard string
	// citusGuard is the guard it runs under on the Citus layout instead, when that
	// differs: guard with a custom plan where guard forces a generic one (citus.go,
	// citusGuardOf). store's layout flag picks between the two (stmt.planGuard).
	citusGuard string
	store      *Store
}

// builder makes the statements of one schema. Every stmt comes from add.
type builder struct {
	q     string // quoted schema
	store *Store // the Store being built, whose layout flag its statements read
	all   []stmt
}

// add returns the statement text with the quoted schema in place of {{s}}, and
// records it.
func (b *builder) add(name, text string) stmt {
	return b.addFor(LayoutMissing, name, text)
}

// addFor is add for a statement that is valid only in one layout.
func (b *builder) addFor(layout Layout, name, text string) stmt {
	return b.record(stmt{name: name, sql: strings.ReplaceAll(text, "{{s}}", b.q), layout: layout})
}

// addGuarded is add for a statement that runs under the plan guard guard
// (planGuardOn or planGuardByID), through guarded.
// On the Citus layout it runs under citusGuardOf(guard).
func (b *builder) addGuarded(guard, name, text string) stmt {
	return b.record(stmt{name: name, sql: strings.ReplaceAll(text, "{{s}}", b.q), guard: guard, citusGuard: citusGuardOf(guard)})
}

func (b *builder) record(st stmt) stmt {
	st.store = b.store
	b.all = append(b.all, st)
	return st
}

// table returns the quoted, schema-qualified name of table (as Store.Table does).
func (b *builder) table(table string) string { return b.q + "." + ident.Quote(table) }

// Table returns the quoted, schema-qualified name of table.
func (s *Store) Table(table string) string { return s.q + "." + ident.Quote(table) }

// SQL returns the named statement for this schema, for tests that EXPLAIN it. The
// store itself never looks statements up by name; SQL panics on an unknown name.
func (s *Store) SQL(name string) string {
	for _, st := range s.all {
		if st.name == name {
			return st.sql
		}
	}
	panic("store: unknown statement " + name)
}

// Now converts an optional clock reading to the statement parameter.
func Now(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC()
}

// NowParam returns the statement parameter for clock c: nil (no clock) selects the
// database's now(), any other clock its current reading.
func NowParam(c interface{ Now() time.Time }) *time.Time {
	if c == nil {
		return nil
	}
	t := c.Now()
	return &t
}

func micros(d time.Duration) int64 { return d.Microseconds() }

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// collectMap reads (key, value) rows into a map: a job's status by id, a count by
// status or queue.
func collectMap[V any](rows pgx.Rows, err error) (map[string]V, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]V{}
	for rows.Next() {
		var k string
		var v V
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}

// collectValues reads every row with scan.
func collectValues[T any](rows pgx.Rows, err error, scan func(pgx.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// collect scans every row of a query with scan.
func collect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (*T, error)) ([]*T, error) {
	return collectValues(rows, err, scan)
}

// sortBatch puts a claimed batch into claim order: UPDATE … RETURNING does not keep
// the order of the CTE that picked the rows, but a batch usually comes back in that
// order already. The sortedness check makes that case one pass without writes, and
// pdqsort bounds the others, where an insertion sort would go quadratic on a reversed
// or mixed batch. BenchmarkSortClaimOrder measures the three shapes.
func sortBatch[T any](batch []T, cmp func(a, b T) int) {
	if !slices.IsSortedFunc(batch, cmp) {
		slices.SortFunc(batch, cmp)
	}
}

// idOrder returns the positions of xs ordered by their job ids. The statements that
// write several jobs by id from an array and wait for row locks — Finish and
// FinishDeleting — send the array in this order and are planned so that their rows
// come out in id order (a nested loop driven by the array, a merge join on the id, or
// the primary key read in order; planguard.go), so they lock the rows in that order
// (TestMultiRowWritesLockInIDOrder). Two of
// them over shared rows then queue one behind the other instead of each holding a
// row the other waits for: a deadlock PostgreSQL breaks only after deadlock_timeout
// (1 s by default) by failing one of the two. A heartbeat (in map order) and a
// completion (in the order handlers returned) once deadlocked so: the heartbeat failed,
// its leases went unrenewed until the next tick, and pickups stalled meanwhile.
// The heartbeat and the reclaim now skip locked rows (SKIP LOCKED) and never wait,
// so their order does not matter.
func idOrder[T any](xs []T, id func(T) string) []int {
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	byID := func(a, b int) int { return strings.Compare(id(xs[a]), id(xs[b])) }
	if !slices.IsSortedFunc(order, byID) {
		slices.SortFunc(order, byID)
	}
	return order
}
