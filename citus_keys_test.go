package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest/memorypub"
)

// TestCitusDedupUniqueScopedByKey runs on a real Citus cluster
// (SKIPLOCK_TEST_CITUS_URL): a deduplication key and a unique key are held per
// concurrency_key. Within one key the second enqueue is a duplicate that reports the
// first job; the same key string under another key is another job, and its duplicate
// reports that key's holder, never the first tenant's — one by one, in a transaction
// and in one EnqueueManyTx across keys. A unique job's side row sits in the
// co-located shard of its key on the job's node, and a job that leaves its unique
// states frees the key of its own tenant only. The SQL enqueue() (the empty key) finds its own
// key's holder.
func TestCitusDedupUniqueScopedByKey(t *testing.T) {
	t.Parallel()
	pool, q, client := citusClient(t)
	ctx := context.Background()
	enqueue := func(db skiplock.DB, order int, opts skiplock.EnqueueOpts) skiplock.EnqueueResult {
		t.Helper()
		r, err := client.EnqueueTx(ctx, db, orderPlaced{Order: order}, &opts)
		if err != nil {
			t.Fatalf("enqueue %+v: %v", opts, err)
		}
		return r
	}
	dedup := func(key string) skiplock.EnqueueOpts {
		return skiplock.EnqueueOpts{ConcurrencyKey: key, DeduplicationKey: "order-7"}
	}
	unique := func(key string) skiplock.EnqueueOpts {
		return skiplock.EnqueueOpts{ConcurrencyKey: key, Unique: &skiplock.UniqueOpts{Key: "nightly"}}
	}

	for _, c := range []struct {
		name string
		opts func(string) skiplock.EnqueueOpts
	}{{"deduplication", dedup}, {"unique", unique}} {
		acme := enqueue(pool, 1, c.opts("acme"))
		if acme.Duplicate {
			t.Fatalf("%s: the first acme job is a duplicate", c.name)
		}
		// Within the key: a duplicate naming the holder, outside and inside a transaction.
		if r := enqueue(pool, 2, c.opts("acme")); !r.Duplicate || r.ID != acme.ID {
			t.Errorf("%s: acme again = %+v; want a duplicate of %s", c.name, r, acme.ID)
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if r := enqueue(tx, 3, c.opts("acme")); !r.Duplicate || r.ID != acme.ID {
				t.Errorf("%s: acme again in a transaction = %+v; want a duplicate of %s", c.name, r, acme.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Another key: another job, whose duplicate names it.
		globex := enqueue(pool, 4, c.opts("globex"))
		if globex.Duplicate || globex.ID == acme.ID {
			t.Fatalf("%s: the same key string for globex = %+v; want a job of its own", c.name, globex)
		}
		if r := enqueue(pool, 5, c.opts("globex")); !r.Duplicate || r.ID != globex.ID {
			t.Errorf("%s: globex again = %+v; want a duplicate of globex's %s, not acme's %s", c.name, r, globex.ID, acme.ID)
		}
		// Many keys in one call: each duplicate names its own key's holder.
		res, err := client.EnqueueManyTx(ctx, pool, []skiplock.EnqueueParams{
			{Args: orderPlaced{Order: 6}, Opts: c.opts("globex")},
			{Args: orderPlaced{Order: 7}, Opts: c.opts("initech")},
			{Args: orderPlaced{Order: 8}, Opts: c.opts("acme")},
			{Args: orderPlaced{Order: 9}, Opts: c.opts("initech")},
		})
		if err != nil {
			t.Fatalf("%s: EnqueueManyTx across keys: %v", c.name, err)
		}
		if !res[0].Duplicate || res[0].ID != globex.ID || !res[2].Duplicate || res[2].ID != acme.ID {
			t.Errorf("%s: EnqueueManyTx duplicates = %+v, %+v; want globex's %s and acme's %s", c.name, res[0], res[2], globex.ID, acme.ID)
		}
		if res[1].Duplicate || !res[3].Duplicate || res[3].ID != res[1].ID {
			t.Errorf("%s: initech in EnqueueManyTx = %+v, %+v; want one job and its duplicate", c.name, res[1], res[3])
		}
		for _, key := range []string{"acme", "globex", "initech"} {
			n := count(t, pool, `SELECT count(*) FROM `+q("jobs")+` WHERE concurrency_key = $1 AND (deduplication_key IS NOT NULL OR unique_key IS NOT NULL) AND kind = 'order_placed'
			  AND (($2 AND deduplication_key = 'order-7') OR (NOT $2 AND unique_key = 'nightly'))`, key, c.name == "deduplication")
			if n != 1 {
				t.Errorf("%s: key %s holds %d jobs, want 1", c.name, key, n)
			}
		}
	}

	// The SQL enqueue() inserts under the key '': its duplicate names the '' key's
	// holder, not a keyed tenant's job of the same deduplication key.
	keyed := enqueue(pool, 20, skiplock.EnqueueOpts{ConcurrencyKey: "acme", DeduplicationKey: "from-sql"})
	var first, again string
	var dup1, dup2 bool
	if err := pool.QueryRow(ctx, `SELECT id::text, duplicate FROM `+q("enqueue")+`('order_placed', '{}', deduplication_key => 'from-sql')`).Scan(&first, &dup1); err != nil {
		t.Fatalf("SQL enqueue: %v", err)
	}
	if err := pool.QueryRow(ctx, `SELECT id::text, duplicate FROM `+q("enqueue")+`('order_placed', '{}', deduplication_key => 'from-sql')`).Scan(&again, &dup2); err != nil {
		t.Fatalf("SQL enqueue again: %v", err)
	}
	if dup1 || first == keyed.ID || !dup2 || again != first {
		t.Errorf("SQL enqueue beside acme's %s: (%s, duplicate %v) then (%s, duplicate %v); want a job of the key '' and its duplicate", keyed.ID, first, dup1, again, dup2)
	}

	// The unique key's side row is beside its job: the co-located job_unique shard of
	// the key, on the job's node, read there.
	acme := enqueue(pool, 10, unique("acme"))
	node, shard := shardOf(t, pool, q("jobs"), "acme")
	worker := nodeConn(t, node)
	var holder string
	err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT job_id::text FROM %s WHERE concurrency_key = 'acme' AND kind = 'order_placed' AND unique_key = 'nightly'`,
		q("job_unique_"+strconv.FormatInt(shardID(t, pool, q("job_unique"), "acme"), 10)))).Scan(&holder)
	if err != nil || holder != acme.ID {
		t.Fatalf("acme's unique key on %s (jobs shard %d): holder %q, %v; want %s", node, shard, holder, err, acme.ID)
	}
	// Leaving the unique states frees acme's key only: a new acme job is inserted,
	// globex's stays a duplicate.
	mustExec(t, pool, `UPDATE `+q("jobs")+` SET status = 'cancelled' WHERE id = $1 AND concurrency_key = 'acme'`, acme.ID)
	if r := enqueue(pool, 11, unique("acme")); r.Duplicate || r.ID == acme.ID {
		t.Errorf("acme after its holder was cancelled = %+v; want a new job", r)
	}
	if r := enqueue(pool, 12, unique("globex")); !r.Duplicate {
		t.Errorf("globex after acme's holder was cancelled = %+v; want still a duplicate", r)
	}
}

// TestCitusOutboxColocated runs on a real Citus cluster (SKIPLOCK_TEST_CITUS_URL): an
// event written with a ConcurrencyKey in the tenant's transaction lands in the outbox
// shard of that key, on the node of the tenant's job (read back from that node's shard
// tables), with its lineage row beside it; a WriteMany across keys places each event
// by its own key; an event without a key goes to the key "".
func TestCitusOutboxColocated(t *testing.T) {
	t.Parallel()
	pool, q, client := citusClient(t)
	ctx := context.Background()
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	event := func(key string) outbox.Event {
		return outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.placed", Payload: []byte(`{"order":1}`), ConcurrencyKey: key}
	}

	var jobID, eventID string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r, err := client.EnqueueTx(ctx, tx, orderPlaced{Order: 1}, &skiplock.EnqueueOpts{ConcurrencyKey: "acme"})
		if err != nil {
			return err
		}
		jobID = r.ID
		eventID, err = ob.Write(ctx, tx, event("acme"))
		return err
	})
	if err != nil {
		t.Fatalf("a job and an event for acme: %v", err)
	}
	jobNode, jobShard := shardOf(t, pool, q("jobs"), "acme")
	eventNode, eventShard := shardOf(t, pool, q("outbox"), "acme")
	if jobNode != eventNode {
		t.Fatalf("acme's job shard %d is on %s, its outbox shard %d on %s: not co-located", jobShard, jobNode, eventShard, eventNode)
	}
	worker := nodeConn(t, jobNode)
	var key string
	if err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT concurrency_key FROM %s WHERE id = $1`, q("outbox_"+strconv.FormatInt(eventShard, 10))), eventID).Scan(&key); err != nil || key != "acme" {
		t.Fatalf("the event %s on %s's outbox shard %d: key %q, %v", eventID, jobNode, eventShard, key, err)
	}
	if err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT concurrency_key FROM %s WHERE id = $1`, q("jobs_"+strconv.FormatInt(jobShard, 10))), jobID).Scan(&key); err != nil || key != "acme" {
		t.Fatalf("the job %s on %s's jobs shard %d: key %q, %v", jobID, jobNode, jobShard, key, err)
	}
	var lineage int
	if err := worker.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE event_id = $1 AND concurrency_key = 'acme'`,
		q("tx_lineage_"+strconv.FormatInt(shardID(t, pool, q("tx_lineage"), "acme"), 10))), eventID).Scan(&lineage); err != nil || lineage != 1 {
		t.Errorf("the event's lineage row on the worker: %d, %v", lineage, err)
	}

	// Many keys in one statement, and one without a key: each by its own key.
	keys := []string{"globex", "initech", "umbrella", ""}
	var evs []outbox.Event
	for _, k := range keys {
		evs = append(evs, event(k))
	}
	ids, err := ob.WriteMany(ctx, pool, evs)
	if err != nil {
		t.Fatalf("WriteMany across keys: %v", err)
	}
	for i, k := range keys {
		if n, shard := inKeyShard(t, pool, q("outbox"), k, ids[i]); n != 1 {
			t.Errorf("event %s of key %q: %d rows in shard %d", ids[i], k, n, shard)
		}
	}
	// A bad key is refused before any SQL runs.
	if _, err := ob.Write(ctx, pool, event(skiplock.EachKey)); !errors.Is(err, skiplock.ErrInvalid) {
		t.Errorf("an event keyed %q: %v; want a validation error", skiplock.EachKey, err)
	}
}

// citusClient is a client on a fresh schema with the Citus layout, the pool, and q,
// which names a table of the schema.
func citusClient(t *testing.T) (*pgxpool.Pool, func(table string) string, *skiplock.Client) {
	t.Helper()
	pool, schema := pgtest.CitusSchema(t)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	return pool, func(table string) string { return `"` + schema + `".` + table }, client
}

// TestCitusOutboxRelay runs the relay on the 3-node cluster: events of several keys
// are published, each claim and mark naming one key; a publish that fails is retried
// and published at its second attempt; the key table empties once all are out.
func TestCitusOutboxRelay(t *testing.T) {
	t.Parallel()
	pool, q, client := citusClient(t)
	ctx := context.Background()
	ob, err := outbox.New(client, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var evs []outbox.Event
	for i, k := range []string{"acme", "globex", "initech", "", "acme", "globex"} {
		evs = append(evs, outbox.Event{AggregateType: "order", AggregateID: strconv.Itoa(i), EventType: "order.placed",
			Payload: []byte(`{}`), ConcurrencyKey: k})
	}
	if _, err := ob.WriteMany(ctx, pool, evs); err != nil {
		t.Fatal(err)
	}
	pub := memorypub.New()
	failed := false
	pub.SetFailure(func(m outbox.Message) error {
		if m.AggregateID == "2" && !failed {
			failed = true
			return errors.New("broker down")
		}
		return nil
	})
	relay, err := ob.NewRelay(pub, outbox.RelayConfig{BatchSize: 4, RetryPolicy: skiplock.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20 && count(t, pool, `SELECT count(*) FROM `+q("outbox")+` WHERE published_at IS NULL`) > 0; i++ {
		if _, _, err := relay.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM `+q("outbox")+` WHERE published_at IS NOT NULL`); n != len(evs) {
		t.Fatalf("%d of %d events published", n, len(evs))
	}
	if n := count(t, pool, `SELECT attempts FROM `+q("outbox")+` WHERE aggregate_id = '2'`); n != 2 {
		t.Errorf("the event whose publish failed once: %d attempts, want 2", n)
	}
	if pub.Count() != len(evs) {
		t.Errorf("the broker received %d messages, want %d", pub.Count(), len(evs))
	}
	relay.RunOnce(ctx) // a claim that finds nothing empties the key table
	if n := count(t, pool, `SELECT count(*) FROM `+q("citus_keys")); n != 0 {
		t.Errorf("%d keys left in the key table once every event is published", n)
	}
}
