package bench

// E1: the per-enqueue cost breakdown (docs/enqueue_cost.md). W1's insert is run
// against schemas that each lack one of its costs — an index, a trigger, the lineage
// row, the NOTIFY, the statement's shape, the client — in interleaved rounds, and each
// cost is read as the time per enqueue it adds to store.Insert's statement without
// NOTIFY ("stmt"): 1/rate(stmt) − 1/rate(without), beside the WAL each enqueue
// writes; the NOTIFY and the client are rows of their own, added to that base. A plain insert into a table as
// wide as jobs (B2's) bounds the whole gap.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// costVariant is one schema of E1 and how an enqueue is made against it.
type costVariant struct {
	name, what string
	// ddl runs on the fresh schema ({{s}} its quoted name) before the clock starts.
	ddl []string
	// plain makes the enqueue B2's plain INSERT into table (jobs or plain); otherwise
	// it is store.Insert, with the NOTIFY when notify, or Client.Enqueue when client.
	plain  string
	notify bool
	client bool
	// solo makes store.Insert's a lone enqueue's (InsertParams.Solo): no lineage row.
	solo bool
}

// idlePartialIndexes are the partial indexes of jobs that a new pending job without
// options does not enter: it pays only their predicates' tests.
var idlePartialIndexes = []string{"jobs_batch_idx", "jobs_dedup_idx", "jobs_expired_lease_idx", "jobs_parent_idx",
	"jobs_retention_idx", "jobs_sequence_idx", "jobs_slot_of_idx", "jobs_tags_idx", "jobs_waiting_idx"}

func costVariants() []costVariant {
	drops := make([]string, len(idlePartialIndexes))
	for i, ix := range idlePartialIndexes {
		drops[i] = "DROP INDEX {{s}}." + ix
	}
	return []costVariant{
		{name: "client", what: "Client.Enqueue, as W1 and W2 (its NOTIFY inside the commit when alone, coalesced after it when not)", client: true},
		{name: "+notify", what: "store.Insert with the NOTIFY inside its commit", notify: true},
		{name: "stmt", what: "store.Insert without NOTIFY: the base every '-' row removes one cost from"},
		{name: "-lineage", what: "without the lineage trigger (tx_lineage row)", ddl: []string{"DROP TRIGGER jobs_lineage ON {{s}}.jobs"}},
		{name: "solo", what: "store.Insert as a lone enqueue sends it (Solo: the trigger's WHEN skips the lineage row, migration 0020)", solo: true},
		{name: "+lineage_set", what: "the lineage trigger's function with the SET search_path clause it had before migration 0019", ddl: []string{`CREATE OR REPLACE FUNCTION {{s}}.jobs_lineage() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
  INSERT INTO {{s}}.tx_lineage (txid, job_id, created_at) SELECT pg_current_xact_id(), id, created_at FROM new_rows;
  RETURN NULL;
END $$`}},
		{name: "-unique_when", what: "without jobs_unique_claim (a BEFORE INSERT trigger's WHEN test)", ddl: []string{"DROP TRIGGER jobs_unique_claim ON {{s}}.jobs"}},
		{name: "-ready_idx", what: "without jobs_ready_idx", ddl: []string{"DROP INDEX {{s}}.jobs_ready_idx"}},
		{name: "-group_ready_idx", what: "without jobs_group_ready_idx", ddl: []string{"DROP INDEX {{s}}.jobs_group_ready_idx"}},
		{name: "-fair_idx", what: "without jobs_fair_idx", ddl: []string{"DROP INDEX {{s}}.jobs_fair_idx"}},
		{name: "-idle_partial", what: "without the " + fmt.Sprint(len(idlePartialIndexes)) + " partial indexes a plain job is not in (their predicate tests)", ddl: drops},
		{name: "-checks", what: "without jobs' two CHECK constraints", ddl: []string{"ALTER TABLE {{s}}.jobs DROP CONSTRAINT jobs_lease_iff_running, DROP CONSTRAINT jobs_max_attempts_positive"}},
		{name: "plain_stmt", what: "B2's plain INSERT (no CTE, ON CONFLICT, RETURNING or NOTIFY) into the full jobs table", plain: "jobs"},
		{name: "bare", what: "B2: the plain INSERT into a table as wide as jobs with only its primary key", plain: "plain"},
	}
}

// costRun is a variant ready to be timed.
type costRun struct {
	v      costVariant
	schema string
	one    func(ctx context.Context, db *pgxpool.Pool, i int64) error
	close  func()
	rates  map[int][]float64 // by connections
	wal    map[int][]float64 // bytes per enqueue, by connections
	cpu    []float64         // the server process's CPU µs per enqueue, 1 connection
}

// serverCPU returns the CPU time in nanoseconds the process pid has run for, from
// /proc/PID/schedstat; false when it cannot be read (the server runs elsewhere).
func serverCPU(pid int) (int64, bool) {
	if pid == 0 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return ns, err == nil
}

func runE1(ctx context.Context, e *Env) (*Result, error) {
	vs := costVariants()
	runs := make([]*costRun, len(vs))
	defer func() {
		for _, r := range runs {
			if r != nil && r.close != nil {
				r.close()
			}
		}
	}()
	for i, v := range vs {
		r, err := prepareCost(ctx, e, fmt.Sprintf("bench_e1_%02d", i), v)
		if err != nil {
			return nil, fmt.Errorf("E1 %s: %w", v.name, err)
		}
		runs[i] = r
	}
	rounds := 5
	if e.Scale > 0 && e.Scale < 0.5 {
		rounds = 1 // a quick look (and the tests)
	}
	d := time.Duration(float64(1500*time.Millisecond) * min(max(e.Scale, 0.1), 1))
	start := time.Now()
	for _, conns := range []int{1, 16} {
		pool, err := e.pool(ctx, int32(conns))
		if err != nil {
			return nil, err
		}
		// With one connection the server process's own CPU time per enqueue is read
		// too (/proc/PID/schedstat, when the server runs on this machine): unlike the
		// rate, it does not move with the disk sync's speed or the machine's load.
		var pid int
		if conns == 1 {
			if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				pool.Close()
				return nil, err
			}
		}
		// Every statement is parsed and planned once per connection before the clock.
		for _, r := range runs {
			if _, err := rowRateOn(ctx, pool, conns, 50*time.Millisecond, r.one); err != nil {
				pool.Close()
				return nil, fmt.Errorf("E1 %s: %w", r.v.name, err)
			}
		}
		for round := range rounds {
			for k := range runs {
				// Each round walks the variants in another order, so none always
				// follows the same neighbour (a checkpoint, an autovacuum).
				r := runs[(k+round*5)%len(runs)]
				var lsn0, lsn1 int64
				if err := e.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn0); err != nil {
					pool.Close()
					return nil, err
				}
				var count atomic.Int64
				cpu0, cpuOK0 := serverCPU(pid)
				rate, err := rowRateOn(ctx, pool, conns, d, func(ctx context.Context, db *pgxpool.Pool, i int64) error {
					count.Add(1)
					return r.one(ctx, db, i)
				})
				n := count.Load()
				if err != nil {
					pool.Close()
					return nil, fmt.Errorf("E1 %s: %w", r.v.name, err)
				}
				if err := e.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&lsn1); err != nil {
					pool.Close()
					return nil, err
				}
				if cpu1, cpuOK1 := serverCPU(pid); cpuOK0 && cpuOK1 && n > 0 {
					r.cpu = append(r.cpu, float64(cpu1-cpu0)/1e3/float64(n))
				}
				r.rates[conns] = append(r.rates[conns], rate)
				if conns == 1 && n > 0 {
					r.wal[conns] = append(r.wal[conns], float64(lsn1-lsn0)/float64(n))
				}
			}
		}
		pool.Close()
	}
	return costResult(runs, time.Since(start)), nil
}

// prepareCost makes v's schema and its enqueue.
func prepareCost(ctx context.Context, e *Env, name string, v costVariant) (*costRun, error) {
	schema, err := e.schema(ctx, name)
	if err != nil {
		return nil, err
	}
	q := `"` + schema + `"`
	for _, s := range v.ddl {
		if _, err := e.Pool.Exec(ctx, strings.ReplaceAll(s, "{{s}}", q)); err != nil {
			return nil, err
		}
	}
	r := &costRun{v: v, schema: schema, rates: map[int][]float64{}, wal: map[int][]float64{}}
	switch {
	case v.plain != "":
		if v.plain == "plain" {
			if err := plainTable(ctx, e, schema, "plain"); err != nil {
				return nil, err
			}
		}
		sql := fmt.Sprintf(plainInsert, q+"."+v.plain)
		r.one = func(ctx context.Context, db *pgxpool.Pool, i int64) error {
			_, err := db.Exec(ctx, sql, noopArgs(i)...)
			return err
		}
	case v.client:
		// A client is bound to a pool: one per pool the rounds pass, made on first use.
		var mu sync.Mutex
		clients := map[*pgxpool.Pool]*skiplock.Client{}
		r.one = func(ctx context.Context, db *pgxpool.Pool, i int64) error {
			mu.Lock()
			c := clients[db]
			if c == nil {
				var err error
				if c, err = skiplock.NewClient(db, skiplock.Config{Schema: schema}); err != nil {
					mu.Unlock()
					return err
				}
				clients[db] = c
			}
			mu.Unlock()
			_, err := c.Enqueue(ctx, noop{I: int(i)}, nil)
			return err
		}
		r.close = func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range clients {
				c.Close()
			}
		}
	default:
		st, err := store.New(schema)
		if err != nil {
			return nil, err
		}
		var n *store.Notify
		if v.notify {
			n = &store.Notify{Channel: skiplock.Channel(schema), Queues: []string{skiplock.DefaultQueue}}
		}
		r.one = func(ctx context.Context, db *pgxpool.Pool, i int64) error {
			args := noopArgs(i)
			id := uuidv7.String(uuidv7.New(time.Now(), 0)) // as Client.Enqueue makes it
			_, err := st.Insert(ctx, db, nil, store.InsertParams{Queue: skiplock.DefaultQueue, Kind: noop{}.Kind(),
				Payload: []byte(args[2].(string)), MaxAttempts: skiplock.DefaultMaxAttempts, Solo: v.solo, ID: &id}, n)
			return err
		}
	}
	return r, nil
}

// costResult reads each variant's median rate as microseconds per enqueue and its
// difference from the base (stmt).
func costResult(runs []*costRun, elapsed time.Duration) *Result {
	extra := map[string]any{}
	base, bare, client := map[int]float64{}, map[int]float64{}, map[int]float64{}
	var stmtCPU []float64
	for _, r := range runs {
		for conns, xs := range r.rates {
			switch r.v.name {
			case "stmt":
				base[conns] = median(xs)
				stmtCPU = r.cpu
			case "bare":
				bare[conns] = median(xs)
			case "client":
				client[conns] = median(xs)
			}
		}
	}
	for i, r := range runs {
		for _, conns := range []int{1, 16} {
			rate := median(r.rates[conns])
			us := 1e6 / rate
			line := fmt.Sprintf("%8.0f enqueues/s  %6.0f µs each", rate, us)
			if base[conns] > 0 && r.v.name != "stmt" {
				// A variant without a cost saves 1/base − 1/rate (negative for the
				// client and +notify: what they add).
				line += fmt.Sprintf("  %+6.0f µs vs stmt", 1e6/base[conns]-us)
				if gap := 1e6/client[conns] - 1e6/bare[conns]; gap > 0 && r.v.name != "client" {
					line += fmt.Sprintf(" (%3.0f%% of the gap client−bare)", 100*(1e6/base[conns]-us)/gap)
				}
			}
			if conns == 1 && len(r.wal[1]) > 0 {
				line += fmt.Sprintf("  WAL %5.0f B", median(r.wal[1]))
			}
			if conns == 1 && len(r.cpu) > 0 {
				c := median(r.cpu)
				line += fmt.Sprintf("  server CPU %4.0f µs", c)
				if b := median(stmtCPU); b > 0 && r.v.name != "stmt" {
					line += fmt.Sprintf(" (%+4.0f µs vs stmt)", b-c)
				}
			}
			extra[fmt.Sprintf("%02dc %02d %s", conns, i, r.v.name)] = line + "  — " + r.v.what
		}
	}
	res := &Result{Workload: "E1", N: 0, Seconds: elapsed.Seconds(), JobsPerSec: client[1], Extra: extra}
	if bare[1] > 0 {
		res.Limit, res.Ratio = "bare (B2's insert), 1 conn", client[1]/bare[1]
	}
	if bare[16] > 0 {
		// W2's ratio, from the interleaved rounds (steadier than W2 beside B2).
		extra["client ÷ bare, 16 conns"] = fmt.Sprintf("%.2f", client[16]/bare[16])
	}
	return res
}
