package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestMigrateCitusRefusedWithoutCitus: the Citus option on a database without the
// citus extension fails with ErrCitusLayout and leaves the single-node layout as the
// migrations made it.
func TestMigrateCitusRefusedWithoutCitus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, schema) })
	applied, err := skiplock.MigrateWith(ctx, pool, schema, skiplock.MigrateOpts{Citus: true})
	if !errors.Is(err, skiplock.ErrCitusLayout) || !strings.Contains(err.Error(), "citus extension is not installed") {
		t.Fatalf("MigrateWith(Citus) on plain PostgreSQL: %v; want ErrCitusLayout naming the missing extension", err)
	}
	if len(applied) == 0 {
		t.Error("the numbered migrations were not applied before the refusal")
	}
	var pk string
	if err := pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`,
		`"`+schema+`".jobs`).Scan(&pk); err != nil || pk != "PRIMARY KEY (id)" {
		t.Errorf("jobs' primary key is %q (%v), want the single-node PRIMARY KEY (id)", pk, err)
	}
	if dist, err := skiplock.Distributed(ctx, pool, schema); err != nil || dist {
		t.Errorf("Distributed = %v, %v on plain PostgreSQL", dist, err)
	}
}

type orderPlaced struct {
	Order int `json:"order"`
}

func (orderPlaced) Kind() string { return "order_placed" }

// TestCitusEnqueueTxColocated runs on a real Citus cluster (SKIPLOCK_TEST_CITUS_URL):
// a user's table distributed by its tenant column and co-located with skiplock's jobs;
// an order and the job EnqueueTx adds for it in the same transaction, both keyed by
// the tenant, land in shards of one hash range on one worker node (read back from that
// node's shard tables, not through the coordinator); a rollback keeps neither; jobs
// of other tenants land by their own keys; what the layout cannot hold (batches) is
// refused with an error naming it.
func TestCitusEnqueueTxColocated(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.CitusSchema(t)
	ctx := context.Background()
	q := func(table string) string { return `"` + schema + `".` + table }
	mustExec(t, pool, `CREATE TABLE `+q("orders")+` (tenant text NOT NULL, id int NOT NULL, total int NOT NULL, PRIMARY KEY (tenant, id))`)
	mustExec(t, pool, `SELECT create_distributed_table($1, 'tenant', colocate_with => $2)`, q("orders"), q("jobs"))

	if dist, err := skiplock.Distributed(ctx, pool, schema); err != nil || !dist {
		t.Fatalf("Distributed = %v, %v; want true", dist, err)
	}
	// The option again: nothing to do, no error.
	if applied, err := skiplock.MigrateWith(ctx, pool, schema, skiplock.MigrateOpts{Citus: true}); err != nil || len(applied) != 0 {
		t.Fatalf("MigrateWith(Citus) on a distributed schema: %v, %v; want nothing applied", applied, err)
	}

	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)

	// Listeners on the coordinator hear the enqueue's NOTIFY: the coordinator evaluates
	// the router insert's pg_notify before it sends the row to the node.
	listener := nodeConn(t, "")
	if _, err := listener.Exec(ctx, `LISTEN "`+schema+`.jobs"`); err != nil {
		t.Fatal(err)
	}

	// The business row and its job in one transaction.
	var jobID string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+q("orders")+` (tenant, id, total) VALUES ('acme', 1, 250)`); err != nil {
			return err
		}
		res, err := client.EnqueueTx(ctx, tx, orderPlaced{Order: 1}, &skiplock.EnqueueOpts{ConcurrencyKey: "acme"})
		jobID = res.ID
		return err
	})
	if err != nil {
		t.Fatalf("the order and its job: %v", err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	n, err := listener.WaitForNotification(waitCtx)
	cancel()
	if err != nil || n.Channel != schema+".jobs" || n.Payload != skiplock.DefaultQueue {
		t.Errorf("the enqueue's NOTIFY on the coordinator: %+v, %v", n, err)
	}

	// Same shard index, same node: co-located.
	jobNode, jobShard := shardOf(t, pool, q("jobs"), "acme")
	orderNode, orderShard := shardOf(t, pool, q("orders"), "acme")
	if jobNode != orderNode {
		t.Fatalf("the job's shard is on %s, the order's on %s: not co-located", jobNode, orderNode)
	}
	// Read both rows on that worker node, from the shard tables themselves.
	worker := nodeConn(t, jobNode)
	var gotKey, gotKind string
	if err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT concurrency_key, kind FROM %s WHERE id = $1`, q("jobs_"+strconv.FormatInt(jobShard, 10))), jobID).
		Scan(&gotKey, &gotKind); err != nil {
		t.Fatalf("the job %s on %s's shard %d: %v", jobID, jobNode, jobShard, err)
	}
	if gotKey != "acme" || gotKind != "order_placed" {
		t.Errorf("the job on the worker: key %q kind %q", gotKey, gotKind)
	}
	var total int
	if err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT total FROM %s WHERE tenant = 'acme' AND id = 1`, q("orders_"+strconv.FormatInt(orderShard, 10)))).Scan(&total); err != nil || total != 250 {
		t.Fatalf("the order on %s's shard %d: %d, %v", jobNode, orderShard, total, err)
	}
	// The lineage row sits beside the job, in the co-located shard of the same key.
	var lineage int
	if err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE job_id = $1 AND concurrency_key = 'acme'`,
		q("tx_lineage_"+strconv.FormatInt(shardID(t, pool, q("tx_lineage"), "acme"), 10))), jobID).Scan(&lineage); err != nil || lineage != 1 {
		t.Errorf("the job's lineage row on the worker: %d, %v", lineage, err)
	}
	// Through the coordinator: one row, by its key. (Client.JobGet does not run on the
	// layout yet: its statement has no key and a generic plan; docs/citus_plans.md.)
	if n := count(t, pool, `SELECT count(*) FROM `+q("jobs")+` WHERE id = $1 AND concurrency_key = 'acme' AND status = 'pending'`, jobID); n != 1 {
		t.Fatalf("job %s through the coordinator: %d rows", jobID, n)
	}

	// A rollback keeps neither row.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, `INSERT INTO `+q("orders")+` (tenant, id, total) VALUES ('acme', 2, 10)`)
	if _, err := client.EnqueueTx(ctx, tx, orderPlaced{Order: 2}, &skiplock.EnqueueOpts{ConcurrencyKey: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM `+q("jobs")+` WHERE concurrency_key = 'acme'`); n != 1 {
		t.Errorf("after the rollback tenant acme has %d jobs, want 1", n)
	}

	// Many tenants in one call: each job is stored under its own key, in its own shard.
	tenants := []string{"globex", "initech", "umbrella", "hooli"}
	var batch []skiplock.EnqueueParams
	for i, tenant := range tenants {
		batch = append(batch, skiplock.EnqueueParams{Args: orderPlaced{Order: 10 + i}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: tenant}})
	}
	res, err := client.EnqueueManyTx(ctx, pool, batch)
	if err != nil {
		t.Fatalf("EnqueueManyTx across tenants: %v", err)
	}
	for i, r := range res {
		if n, shard := inKeyShard(t, pool, q("jobs"), tenants[i], r.ID); n != 1 {
			t.Errorf("tenant %s's job %s: %d rows in shard %d", tenants[i], r.ID, n, shard)
		}
	}

	// The SQL enqueue function works too (its job has no key: the '' key's shard).
	if n := count(t, pool, `SELECT count(*) FROM `+q("enqueue")+`('from_sql') WHERE NOT duplicate`); n != 1 {
		t.Errorf("%s.enqueue: %d jobs inserted", schema, n)
	}

	// Batches are refused, naming them; nothing inserted. (Deduplication and unique
	// keys work, scoped by the key: TestCitusDedupUniqueScopedByKey.)
	batchID, err := client.BatchOpen(ctx, skiplock.Batch{Description: "refused on Citus"})
	if err != nil {
		t.Fatalf("BatchOpen (a coordinator table): %v", err)
	}
	_, err = client.BatchAdd(ctx, batchID, []skiplock.EnqueueParams{{Args: orderPlaced{Order: 3}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: "acme"}}})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, "batches") {
		t.Errorf("BatchAdd on Citus: %v; want SQLSTATE 0A000 naming batches", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM `+q("jobs")+` WHERE concurrency_key = 'acme'`); n != 1 {
		t.Errorf("after the refusal tenant acme has %d jobs, want 1", n)
	}

	// A default worker configuration starts on the layout: the scheduler and the
	// retention service run there too (citus_maint_test.go).
	ws := skiplock.NewWorkers()
	if err := ws.AddHandler("order_placed", func(context.Context, *skiplock.Job) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	workers, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Workers: ws,
		Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(workers.Close)
	if err := workers.Start(ctx); err != nil {
		t.Errorf("Start on the Citus layout with the default configuration: %v", err)
	} else {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := workers.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
	}

	// The partitioned layout is refused on a distributed schema.
	if _, err := skiplock.PartitionJobs(ctx, pool, schema, skiplock.PartitionOpts{}); !errors.Is(err, skiplock.ErrNotPartitionable) {
		t.Errorf("PartitionJobs on the Citus layout: %v; want ErrNotPartitionable", err)
	}
}

type execer interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}

func mustExec(t *testing.T, db execer, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// shardID is the shard of table that holds key.
func shardID(t *testing.T, pool *pgxpool.Pool, table, key string) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(), `SELECT get_shard_id_for_distribution_column($1::regclass, $2::text)`, table, key).Scan(&id); err != nil {
		t.Fatalf("the shard of %s for %q: %v", table, key, err)
	}
	return id
}

// inKeyShard counts the rows of table with concurrency_key key and id id that sit in
// the shard of table that holds key, and returns that shard.
func inKeyShard(t *testing.T, pool *pgxpool.Pool, table, key, id string) (int, int64) {
	t.Helper()
	shard := shardID(t, pool, table, key)
	return count(t, pool, `SELECT count(*) FROM `+table+` WHERE concurrency_key = $1 AND id = $2
	  AND get_shard_id_for_distribution_column($3::regclass, concurrency_key) = $4`, key, id, table, shard), shard
}

// shardOf is the node ("host:port") and shard of table that hold key.
func shardOf(t *testing.T, pool *pgxpool.Pool, table, key string) (string, int64) {
	t.Helper()
	id := shardID(t, pool, table, key)
	var node string
	if err := pool.QueryRow(context.Background(), `SELECT nodename || ':' || nodeport FROM citus_shards WHERE shardid = $1`, id).Scan(&node); err != nil {
		t.Fatalf("the node of shard %d: %v", id, err)
	}
	return node, id
}

// nodeConn connects to one node ("host:port") of the cluster as the coordinator's URL
// does; "" is the coordinator.
func nodeConn(t *testing.T, node string) *pgx.Conn {
	t.Helper()
	u, err := url.Parse(pgtest.CitusURL(t))
	if err != nil {
		t.Fatalf("the Citus URL must be a postgres:// URL here: %v", err)
	}
	if node != "" {
		u.Host = node
	}
	conn, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		t.Fatalf("connecting to the worker node %s: %v", node, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
