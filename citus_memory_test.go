package skiplock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
)

// TestCitusWorkerMemoryPerJob enqueues a few thousand jobs through one coordinator
// connection and reads the private memory (RssAnon) of the worker node's backends
// that serve it. The layout's triggers run on that backend, once per job: they must
// not leave memory behind per call. Before they wrote the co-located shards of
// citus_keys and tx_lineage directly, each call ran a distributed query from the
// worker node and the backend kept ~55 KB per job until the connection closed (a
// node OOM-killed under a bulk load).
func TestCitusWorkerMemoryPerJob(t *testing.T) {
	t.Parallel()
	pool, q, client := citusClient(t)
	ctx := context.Background()
	const key = "memory"
	node, _ := shardOf(t, pool, q("jobs"), key)
	coord := nodeConn(t, "")
	worker := nodeConn(t, node)
	var gpid int64
	if err := coord.QueryRow(ctx, `SELECT citus_backend_gpid()`).Scan(&gpid); err != nil {
		t.Fatal(err)
	}
	enqueue := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := client.EnqueueTx(ctx, coord, orderPlaced{Order: i}, &skiplock.EnqueueOpts{ConcurrencyKey: key}); err != nil {
				t.Fatalf("enqueue %d: %v", i, err)
			}
		}
		// A bulk insert of several rows per statement, through the same connection.
		params := make([]skiplock.EnqueueParams, 50)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: orderPlaced{Order: from + n + i}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: key}}
		}
		if _, err := client.EnqueueManyTx(ctx, coord, params); err != nil {
			t.Fatalf("enqueue many: %v", err)
		}
	}
	// The backends on the worker node serving this coordinator connection (its
	// connections carry the coordinator backend's global pid in their name).
	rss := func() (kb int64) {
		t.Helper()
		rows, err := worker.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`,
			fmt.Sprintf("citus_internal gpid=%d", gpid))
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		for rows.Next() {
			var pid int
			if err := rows.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(pids) == 0 {
			t.Fatalf("no backend on %s serves the coordinator backend %d", node, gpid)
		}
		for _, pid := range pids {
			kb += rssAnon(t, pid)
		}
		return kb
	}
	// Warm up: the backend's caches (plans, metadata) fill on first use.
	enqueue(0, 300)
	before := rss()
	const n = 3000
	enqueue(1000, n)
	after := rss()
	perJob := float64(after-before) * 1024 / float64(n+50)
	t.Logf("worker backend RssAnon %d kB → %d kB over %d jobs: %.0f bytes per job", before, after, n+50, perJob)
	if perJob > 5*1024 {
		t.Errorf("the worker node's backend grew %.0f bytes per job enqueued (%d kB → %d kB over %d jobs); want under 5 KB",
			perJob, before, after, n+50)
	}
}

// rssAnon is the private resident memory (kB) of a process of this host: the test
// cluster runs on loopback, so its backends are local processes.
func rssAnon(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("the worker backend's memory (the Citus test cluster must run on this host): %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("RssAnon of %d: %q: %v", pid, v, err)
			}
			return kb
		}
	}
	t.Fatalf("no RssAnon in /proc/%d/status", pid)
	return 0
}

// TestCitusConcurrentMultiKeyBatches runs two batches of 1,000 jobs over the same 64
// new keys at once, in transactions, one listing the keys in order and the other in
// reverse: each batch makes the 64 keys' rows of the key table and holds them to its
// commit, and neither may deadlock the other (SQLSTATE 40P01). In the later rounds the
// keys are there already, with jobs only for later, and both batches' jobs are due
// earlier: each lowers the 64 rows' run_at, which holds them too.
func TestCitusConcurrentMultiKeyBatches(t *testing.T) {
	t.Parallel()
	pool, q, client := citusClient(t)
	ctx := context.Background()
	const keys, jobs = 64, 1000
	later := time.Now().Add(2 * time.Hour)
	for round := range 6 {
		var runAt *time.Time
		if round >= 3 {
			// The keys have a job for later; the batches' jobs are due sooner.
			ps := make([]skiplock.EnqueueParams, keys)
			for k := range ps {
				ps[k] = skiplock.EnqueueParams{Args: orderPlaced{Order: k}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: fmt.Sprintf("r%d-k%02d", round, k), RunAt: later}}
			}
			if _, err := client.EnqueueMany(ctx, ps); err != nil {
				t.Fatal(err)
			}
			at := later.Add(-time.Hour)
			runAt = &at
		}
		batch := func(reverse bool) []skiplock.EnqueueParams {
			ps := make([]skiplock.EnqueueParams, jobs)
			for i := range ps {
				k := i % keys
				if reverse {
					k = keys - 1 - k
				}
				ps[i] = skiplock.EnqueueParams{Args: orderPlaced{Order: i}, Opts: skiplock.EnqueueOpts{ConcurrencyKey: fmt.Sprintf("r%d-k%02d", round, k)}}
				if runAt != nil {
					ps[i].Opts.RunAt = *runAt
				}
			}
			return ps
		}
		errs := make(chan error, 2)
		for _, reverse := range []bool{false, true} {
			go func() {
				errs <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := client.EnqueueManyTx(ctx, tx, batch(reverse))
					return err
				})
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: two batches over the same %d keys: %v", round, keys, err)
			}
		}
		if n := count(t, pool, `SELECT count(*) FROM `+q("citus_keys")+` WHERE concurrency_key LIKE $1`, fmt.Sprintf("r%d-%%", round)); n != keys {
			t.Errorf("round %d: %d rows in the key table; want %d", round, n, keys)
		}
		want := 2 * jobs
		if runAt != nil {
			want += keys
			if n := count(t, pool, `SELECT count(*) FROM `+q("citus_keys")+` WHERE concurrency_key LIKE $1 AND run_at <= $2`, fmt.Sprintf("r%d-%%", round), *runAt); n != keys {
				t.Errorf("round %d: %d keys' run_at lowered to the batches' jobs; want %d", round, n, keys)
			}
		}
		if n := count(t, pool, `SELECT count(*) FROM `+q("jobs")+` WHERE concurrency_key LIKE $1`, fmt.Sprintf("r%d-%%", round)); n != want {
			t.Errorf("round %d: %d jobs; want %d", round, n, want)
		}
	}
}
