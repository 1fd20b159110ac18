package bench

// The enqueue path's own references, measured in the same run as the workloads they
// judge (issue #49): B2, a plain one-row INSERT into a table as wide as jobs (W1's
// and W2's limit), and B3, a bare COPY of W3's rows into the jobs table (W3's limit).

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// plainTable creates, in schema, a table named name with the columns, defaults and
// checks of jobs and nothing else but its primary key: no other index, no trigger.
func plainTable(ctx context.Context, e *Env, schema, name string) error {
	_, err := e.Pool.Exec(ctx, `CREATE TABLE "`+schema+`".`+name+` (LIKE "`+schema+`".jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE, PRIMARY KEY (id))`)
	return err
}

// plainInsert is the row an enqueue of W1 writes (its id, txid, status and times
// from the column defaults), as one plain INSERT with no CTE, no RETURNING and no
// NOTIFY.
const plainInsert = `INSERT INTO %s (queue, kind, payload, priority, max_attempts, created_at, updated_at)
VALUES ($1, $2, $3::jsonb, $4, $5, now(), now())`

// rowRate measures commits per second over d with conns connections, each commit
// one execution of sql with the arguments args(i) gives (i counts from 0).
func rowRate(ctx context.Context, e *Env, conns int, d time.Duration, sql string, args func(i int64) []any) (float64, error) {
	pool, err := e.pool(ctx, int32(conns))
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	return rowRateOn(ctx, pool, conns, d, func(ctx context.Context, db *pgxpool.Pool, i int64) error {
		_, err := db.Exec(ctx, sql, args(i)...)
		return err
	})
}

// rowRateOn calls one(i) from conns goroutines on pool for d and returns the calls
// per second.
func rowRateOn(ctx context.Context, pool *pgxpool.Pool, conns int, d time.Duration, one func(context.Context, *pgxpool.Pool, int64) error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	start := time.Now()
	deadline := start.Add(d)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := one(ctx, pool, next.Add(1)-1); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(next.Load()) / elapsed.Seconds(), nil
}

// noopArgs are plainInsert's arguments for W1's i-th job.
func noopArgs(i int64) []any {
	b, _ := json.Marshal(noop{I: int(i)})
	return []any{skiplock.DefaultQueue, noop{}.Kind(), string(b), 0, skiplock.DefaultMaxAttempts}
}

func runB2(ctx context.Context, e *Env) (*Result, error) {
	schema, err := e.schema(ctx, "bench_b2")
	if err != nil {
		return nil, err
	}
	if err := plainTable(ctx, e, schema, "plain"); err != nil {
		return nil, err
	}
	sql := fmt.Sprintf(plainInsert, `"`+schema+`".plain`)
	d := time.Duration(float64(3*time.Second) * min(max(e.Scale, 0.1), 1))
	one, err := rowRate(ctx, e, 1, d, sql, noopArgs)
	if err != nil {
		return nil, err
	}
	many, err := rowRate(ctx, e, 16, d, sql, noopArgs)
	if err != nil {
		return nil, err
	}
	e.b2one, e.b2many = one, many
	return &Result{Workload: "B2", JobsPerSec: one, Seconds: d.Seconds() * 2, Settings: e.Settings,
		Extra: map[string]any{"insert_commits_per_sec_1_conn": int(one), "insert_commits_per_sec_16_conns": int(many),
			"table": "jobs' columns, defaults and checks; primary key only; W1's row"}}, nil
}

// copyColumns are the columns W3's COPY writes (store.CopyInsert's, with no run_at
// and no clock, and the lane marks W3's COPY reads for its plain queue: false, false).
var copyColumns = []string{"id", "queue", "kind", "payload", "priority", "max_attempts", "metadata", "tags", "concurrency_key", "grouped", "fair_indexed"}

// copyRows returns W3's rows from first, n of them, ready for COPY.
func copyRows(first, n int) [][]any {
	stamp := time.Now()
	rows := make([][]any, n)
	for k := range rows {
		b, _ := json.Marshal(noop{I: first + k})
		rows[k] = []any{uuidv7.New(stamp, uint32(k)), skiplock.DefaultQueue, noop{}.Kind(), json.RawMessage(b), int32(0), int32(skiplock.DefaultMaxAttempts), nil, nil, "", false, false}
	}
	return rows
}

// bareCopy runs W3's shape (total rows in COPYs of 1,000 from 2 goroutines, each its
// own transaction) into table of a fresh schema made by prepare, the rows built
// before the clock starts, and returns the rows per second.
func bareCopy(ctx context.Context, e *Env, name string, total int, table string, prepare func(schema string) error) (float64, error) {
	const unit = 1000
	batches := make(map[int][][]any, total/unit+1)
	for first := 0; first < total; first += unit {
		batches[first] = copyRows(first, min(unit, total-first))
	}
	var mu sync.Mutex
	schema, elapsed, _, err := bulkRunPrepared(ctx, e, name, total, unit, prepare,
		func(ctx context.Context, c *skiplock.Client, db skiplock.DB, first, n int) error {
			mu.Lock()
			rows := batches[first]
			mu.Unlock()
			copied, err := db.(interface {
				CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error)
			}).CopyFrom(ctx, pgx.Identifier{c.Schema(), table}, copyColumns, pgx.CopyFromRows(rows))
			if err == nil && int(copied) != n {
				err = fmt.Errorf("%s copied %d of %d rows", name, copied, n)
			}
			return err
		})
	if err != nil {
		return 0, err
	}
	var rows int64
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".`+table).Scan(&rows); err != nil {
		return 0, err
	}
	if rows != int64(total) {
		return 0, fmt.Errorf("%s wrote %d rows, want %d", name, rows, total)
	}
	return float64(total) / elapsed.Seconds(), nil
}

func runB3(ctx context.Context, e *Env) (*Result, error) {
	total := e.n(100000)
	jobs, err := bareCopy(ctx, e, "B3", total, "jobs", nil)
	if err != nil {
		return nil, err
	}
	plain, err := bareCopy(ctx, e, "B3P", total, "plain", func(schema string) error { return plainTable(ctx, e, schema, "plain") })
	if err != nil {
		return nil, err
	}
	e.b3 = jobs
	return &Result{Workload: "B3", N: total, Seconds: float64(total) / jobs, JobsPerSec: jobs, Settings: e.Settings,
		Extra: map[string]any{"copy_rows_per_sec_into_jobs": int(jobs), "copy_rows_per_sec_into_plain_table": int(plain),
			"note": "W3's rows prebuilt, COPY of 1,000 per transaction, 2 goroutines; plain = jobs' columns with only the primary key"}}, nil
}
