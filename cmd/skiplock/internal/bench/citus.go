package bench

// The Citus cluster's workloads (docs/citus.md, "Benchmarks on the cluster"):
//
//	C1  W3, W5 and W6 on the plain node and on the cluster, in turns, and the
//	    cluster's ratio to the plain node (both with the same keys and DeleteOnSuccess);
//	CH  the router hop: one job at a time through enqueue, claim, heartbeat and finish,
//	    each statement's median and p99 on the plain node and through the coordinator;
//	CN  per-node figures: W5's shape with every key on one worker node, then over all
//	    of them, each node's CPU per job, and the model of jobs/s per added worker node;
//	CQ  the quiet keys' pickup while key A holds 1,000,000 pending jobs.
//
// C1 and CH need a plain node (the bench's own database) and a cluster (Env.Cluster,
// skiplock bench --citus-url); CN and CQ need only the cluster, which may be the
// bench's own database under --citus. Each runs from a file of its own (citus_c1.go,
// citus_ch.go, citus_cn.go, citus_cq.go); this one selects them and holds what they share.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
)

// CitusKeys is how many concurrency keys the jobs are spread over on the cluster
// unless skiplock bench --citus-keys says otherwise: twice the layout's 32 shards, so
// that every shard, and so both worker nodes, hold keys, and each key of W5's 50,000
// jobs holds some 780 of them.
const CitusKeys = 64

// citusNames are the workloads that run on the Citus layout (skiplock bench --citus);
// clusterNames those that need a Citus cluster and run only when named.
var (
	citusNames   = map[string]bool{"W3": true, "W5": true, "W6": true, "CN": true, "CQ": true}
	clusterNames = map[string]bool{"C1": true, "CH": true, "CN": true, "CQ": true}
	// plainAndCluster need a plain node beside the cluster.
	plainAndCluster = map[string]bool{"C1": true, "CH": true}
)

// SelectCitus is Select for a database that is a Citus coordinator (skiplock bench
// --citus): "all" is W3, W5, W6 and CN; a named workload that does not run on the
// Citus layout is refused by name; no baseline is added (B1's and B3's statements
// are the single node's, and their targets are the single node's).
func SelectCitus(spec string) ([]Workload, error) {
	ws, err := Select(spec)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for _, w := range strings.Split(spec, ",") {
		named[strings.ToUpper(strings.TrimSpace(w))] = true
	}
	all := spec == "" || strings.EqualFold(strings.TrimSpace(spec), "all")
	var out []Workload
	for _, w := range ws {
		switch {
		case all && (w.Name == "W3" || w.Name == "W5" || w.Name == "W6"):
			out = append(out, w)
		case all:
		case citusNames[w.Name]:
			out = append(out, w)
		case named[w.Name]:
			return nil, fmt.Errorf("%s does not run on the Citus layout (W3, W5, W6, CN and CQ do; C1 and CH compare a plain node with a cluster named by --citus-url)", w.Name)
		}
	}
	if all {
		for _, w := range All() {
			if w.Name == "CN" {
				out = append(out, w)
			}
		}
	}
	return out, nil
}

// NeedsCluster reports whether ws holds a workload that needs a Citus cluster, and
// whether one of them also needs a plain node beside it (C1, CH).
func NeedsCluster(ws []Workload) (cluster, plain bool) {
	for _, w := range ws {
		cluster = cluster || clusterNames[w.Name]
		plain = plain || plainAndCluster[w.Name]
	}
	return cluster, plain
}

// cluster is the Citus cluster a cluster workload runs on: Env.Cluster, or e itself
// when it is a coordinator.
func (e *Env) cluster(workload string) (*Env, error) {
	switch {
	case e.Cluster != nil:
		e.Cluster.Progress = e.Progress
		return e.Cluster, nil
	case e.Citus:
		return e, nil
	}
	return nil, fmt.Errorf("%s runs on a Citus cluster: name its coordinator with --citus-url (bash scripts/citus.sh start prints one)", workload)
}

// plainAndClusterEnvs returns the plain node's environment for a comparison (e with
// the cluster's keys and DeleteOnSuccess, so that both write the same rows and do
// the same work) and the cluster's.
func (e *Env) plainAndClusterEnvs(workload string) (*Env, *Env, error) {
	if e.Citus || e.Cluster == nil {
		return nil, nil, fmt.Errorf("%s compares a plain node with a Citus cluster: run it on a plain node (the bench's throwaway PostgreSQL, or --database-url) and name the cluster's coordinator with --citus-url", workload)
	}
	c := e.Cluster
	c.Progress = e.Progress
	plain := &Env{Pool: e.Pool, URL: e.URL, Settings: e.Settings, Progress: e.Progress, Scale: e.Scale,
		Keys: c.Keys, DeleteOnSuccess: true}
	return plain, c, nil
}

// serverSettings reads the settings that decide a commit's cost on the server of pool.
func serverSettings(ctx context.Context, pool *pgxpool.Pool) string {
	var fsync, sync, fpw string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')`).Scan(&fsync, &sync, &fpw); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fmt.Sprintf("fsync=%s synchronous_commit=%s full_page_writes=%s", fsync, sync, fpw)
}

// settingsNote compares the two servers' commit settings: a durable plain node beside
// scripts/citus.sh's cluster (fsync off) measures the disk, not the hop.
func settingsNote(ctx context.Context, plain, cluster *Env) (string, string) {
	p, c := serverSettings(ctx, plain.Pool), serverSettings(ctx, cluster.Pool)
	if p == c {
		return "plain node and coordinator: " + p, ""
	}
	return fmt.Sprintf("plain node: %s; coordinator: %s", p, c),
		"the two servers commit differently: run the plain node as the cluster runs (skiplock bench --relaxed against scripts/citus.sh's cluster) for a comparison of the hop, not of the disks"
}

// thousands renders a rate with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// isolatedValue runs f on e and then drops the schemas it made, as isolated does for
// a workload.
func isolatedValue[T any](ctx context.Context, e *Env, f func() (T, error)) (T, error) {
	var v T
	_, err := isolated(func(context.Context, *Env) (*Result, error) {
		var err error
		v, err = f()
		return nil, err
	})(ctx, e)
	return v, err
}

// loadConn runs load on a connection of its own, closed after it, when e is a Citus
// cluster, and on e.Pool otherwise. On Citus 13.2 a worker node's backend keeps some
// 55 KB for every job inserted through the coordinator's connection to it until that
// connection closes (the layout's triggers on the shards, docs/citus.md, "Benchmarks
// on the cluster"): a million jobs through one long-lived connection drove a worker
// backend to 22 GB and the kernel killed it. Short connections bound what the bench's
// own loading holds.
func (e *Env) loadConn(ctx context.Context, load func(db skiplock.DB) error) error {
	if !e.Citus {
		return load(e.Pool)
	}
	conn, err := pgx.Connect(ctx, e.URL)
	if err != nil {
		return fmt.Errorf("a loading connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return load(conn)
}
