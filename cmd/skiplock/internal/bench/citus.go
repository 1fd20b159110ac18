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
// bench's own database under --citus.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/store"
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

// c1Pair is one workload on both sides.
type c1Pair struct {
	name           string
	plain, cluster *Result
}

func runC1(ctx context.Context, e *Env) (*Result, error) {
	plain, cl, err := e.plainAndClusterEnvs("C1")
	if err != nil {
		return nil, err
	}
	runs := []struct {
		name string
		run  func(context.Context, *Env) (*Result, error)
	}{{"W3", runW3}, {"W5", runW5}, {"W6", runW6}}
	var pairs []c1Pair
	start := time.Now()
	for i, w := range runs {
		// In turns, each workload's first side alternating, so that neither side has
		// the quieter minutes of the machine.
		sides := []*Env{plain, cl}
		if i%2 == 1 {
			sides = []*Env{cl, plain}
		}
		p := c1Pair{name: w.name}
		for _, side := range sides {
			r, err := isolated(w.run)(ctx, side)
			if err != nil {
				where := "plain node"
				if side.Citus {
					where = "cluster"
				}
				return nil, fmt.Errorf("C1: %s on the %s: %w", w.name, where, err)
			}
			if side.Citus {
				p.cluster = r
			} else {
				p.plain = r
			}
		}
		pairs = append(pairs, p)
	}
	return c1Result(ctx, plain, cl, pairs, time.Since(start)), nil
}

// c1Result is C1's report: a line per workload with both sides and the ratio, W5's
// ratio as the result's own.
func c1Result(ctx context.Context, plain, cl *Env, pairs []c1Pair, took time.Duration) *Result {
	settings, warn := settingsNote(ctx, plain, cl)
	r := &Result{Workload: "C1", Seconds: took.Seconds(), Settings: cl.Settings + "; " + settings,
		Extra: map[string]any{"keys": fmt.Sprintf("%d concurrency keys, DeleteOnSuccess, on both sides", cl.Keys)}}
	if warn != "" {
		r.Extra["warning"] = warn
	}
	for _, p := range pairs {
		line := fmt.Sprintf("plain %s jobs/s, cluster %s jobs/s, cluster/plain %.2f×",
			thousands(p.plain.JobsPerSec), thousands(p.cluster.JobsPerSec), p.cluster.JobsPerSec/max(p.plain.JobsPerSec, 1e-9))
		if p.name == "W6" {
			line = fmt.Sprintf("pickup p50/p95/p99 plain %.2f/%.2f/%.2f ms, cluster %.2f/%.2f/%.2f ms, cluster/plain p50 %.2f×, p99 %.2f×",
				p.plain.P50ms, p.plain.P95ms, p.plain.P99ms, p.cluster.P50ms, p.cluster.P95ms, p.cluster.P99ms,
				p.cluster.P50ms/max(p.plain.P50ms, 1e-9), p.cluster.P99ms/max(p.plain.P99ms, 1e-9))
		}
		r.Extra[p.name] = line
		if p.name == "W5" {
			r.N, r.JobsPerSec = p.cluster.N, p.cluster.JobsPerSec
			r.Limit, r.Ratio = "W5 on the plain node", p.cluster.JobsPerSec/max(p.plain.JobsPerSec, 1e-9)
			r.Verified = "plain " + p.plain.Verified + "; cluster " + p.cluster.Verified
			r.Extra["W5_batches_cluster"] = p.cluster.Extra["batches"]
		}
	}
	return r
}

// thousands renders a rate with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// chStatements are CH's statements, in the order each iteration runs them.
var chStatements = []string{"enqueue", "claim", "heartbeat", "finish"}

// chRun runs n iterations (after warm warm-up ones) of one job's life on e, one
// statement at a time on one connection, and returns each statement's latencies.
func chRun(ctx context.Context, e *Env, n, warm int) (map[string]*latencies, error) {
	schema, err := e.schema(ctx, "bench_ch")
	if err != nil {
		return nil, err
	}
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	pool, err := e.pool(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := st.Distributed(ctx, pool); err != nil { // learnt once, before the clock
		return nil, err
	}
	app, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, NotifyCoalesce: -1})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	lat := map[string]*latencies{}
	for _, s := range chStatements {
		lat[s] = &latencies{}
	}
	stop := e.progress("CH", n+warm, func() int64 { return int64(len(lat["finish"].d)) })
	defer stop()
	for i := 0; i < n+warm; i++ {
		key := e.key(i)
		if key == "" {
			key = "tenant-0"
		}
		timed := func(name string, f func() error) error {
			t := time.Now()
			if err := f(); err != nil {
				return fmt.Errorf("CH: %s of iteration %d: %w", name, i, err)
			}
			if i >= warm {
				lat[name].add(time.Since(t))
			}
			return nil
		}
		if err := timed("enqueue", func() error {
			_, err := app.Enqueue(ctx, noop{I: i}, &skiplock.EnqueueOpts{ConcurrencyKey: key})
			return err
		}); err != nil {
			return nil, err
		}
		var jobs []*store.Job
		p := store.ClaimParams{Queue: skiplock.DefaultQueue, WorkerID: "bench-ch", Limit: 1, Lease: time.Minute}
		if err := timed("claim", func() (err error) {
			if e.Citus {
				jobs, err = st.ClaimKey(ctx, pool, nil, p, key)
			} else {
				jobs, err = st.Claim(ctx, pool, nil, p)
			}
			if err == nil && len(jobs) != 1 {
				err = fmt.Errorf("claimed %d jobs, want 1", len(jobs))
			}
			return err
		}); err != nil {
			return nil, err
		}
		lease := store.Lease{ID: jobs[0].ID, Token: *jobs[0].LeaseToken, Key: jobs[0].ConcurrencyKey}
		if err := timed("heartbeat", func() error {
			m, err := st.Heartbeat(ctx, pool, nil, []store.Lease{lease}, time.Minute, []bool{true})
			if err == nil && !m[lease.ID] {
				err = errors.New("the lease was not renewed")
			}
			return err
		}); err != nil {
			return nil, err
		}
		if err := timed("finish", func() error {
			m, err := st.FinishDeleting(ctx, pool, nil, []store.Outcome{{Lease: lease, Action: store.ActionComplete}})
			if err == nil && m[lease] != "succeeded" {
				err = fmt.Errorf("finished as %q", m[lease])
			}
			return err
		}); err != nil {
			return nil, err
		}
	}
	var left int64
	if err := e.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs`).Scan(&left); err != nil {
		return nil, err
	}
	if left != 0 {
		return nil, fmt.Errorf("CH: %d jobs left after %d deleted on success", left, n+warm)
	}
	return lat, nil
}

// median and p99 of l in milliseconds.
func medP99(l *latencies) (float64, float64) {
	var r Result
	l.fill(&r)
	return r.P50ms, r.P99ms
}

func runCH(ctx context.Context, e *Env) (*Result, error) {
	plain, cl, err := e.plainAndClusterEnvs("CH")
	if err != nil {
		return nil, err
	}
	n, warm := e.n(2000), 50
	start := time.Now()
	// The plain node first, then the cluster, then the plain node again: the hop is
	// read against the mean of the two plain passes, so that a drift of the machine
	// over the run does not land on one side.
	var sides []map[string]*latencies
	for i, side := range []*Env{plain, cl, plain} {
		lat, err := isolatedValue(ctx, side, func() (map[string]*latencies, error) { return chRun(ctx, side, n, warm) })
		if err != nil {
			return nil, fmt.Errorf("CH: pass %d: %w", i+1, err)
		}
		sides = append(sides, lat)
	}
	settings, warn := settingsNote(ctx, plain, cl)
	r := &Result{Workload: "CH", N: n, Seconds: time.Since(start).Seconds(), Settings: cl.Settings + "; " + settings,
		Verified: fmt.Sprintf("ok: every job claimed, renewed and deleted on success, %d per pass (3 passes: plain, cluster, plain)", n+warm),
		Extra:    map[string]any{"measured": fmt.Sprintf("%d iterations (after %d of warm-up) of one job's life on one connection, one statement at a time; enqueue is Client.Enqueue, claim/heartbeat/finish the store's statements (the single node's, or the Citus layout's naming the key); finish deletes on success", n, warm)}}
	if warn != "" {
		r.Extra["warning"] = warn
	}
	var hopSum float64
	for _, s := range chStatements {
		p1, p1t := medP99(sides[0][s])
		c, ct := medP99(sides[1][s])
		p2, p2t := medP99(sides[2][s])
		pm, pt := (p1+p2)/2, (p1t+p2t)/2
		hopSum += c - pm
		r.Extra["hop_"+s] = fmt.Sprintf("median plain %.3f ms (passes %.3f, %.3f), cluster %.3f ms: hop %+.3f ms (%.2f×); p99 plain %.3f ms, cluster %.3f ms",
			pm, p1, p2, c, c-pm, c/max(pm, 1e-9), pt, ct)
	}
	r.Extra["hop_per_job"] = fmt.Sprintf("%+.3f ms of median latency per job's four statements", hopSum)
	cm, _ := medP99(sides[1]["claim"])
	r.P50ms = cm
	return r, nil
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

// citusNode is one node of the cluster: its address and the process id of its
// postmaster, when the node runs on this machine and its data directory is readable.
type citusNode struct {
	name string // coordinator, or host:port
	host string
	port int
	pid  int
}

// citusNodes returns the coordinator and the active worker nodes of the cluster,
// each with its postmaster's process id when it can be read (CPU accounting).
func citusNodes(ctx context.Context, c *Env) ([]citusNode, error) {
	nodes := []citusNode{{name: "coordinator"}}
	rows, err := c.Pool.Query(ctx, `SELECT nodename, nodeport FROM pg_dist_node WHERE isactive AND noderole = 'primary' AND groupid <> 0 ORDER BY nodeport, nodename`)
	if err != nil {
		return nil, fmt.Errorf("listing the worker nodes: %w", err)
	}
	for rows.Next() {
		var n citusNode
		if err := rows.Scan(&n.host, &n.port); err != nil {
			rows.Close()
			return nil, err
		}
		n.name = fmt.Sprintf("%s:%d", n.host, n.port)
		nodes = append(nodes, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range nodes {
		nodes[i].pid = c.nodePID(ctx, nodes[i])
	}
	return nodes, nil
}

// nodePID is the postmaster's process id of node (0 when it cannot be read): from
// postmaster.pid in its data directory, asked of the node itself with the
// coordinator's credentials.
func (e *Env) nodePID(ctx context.Context, n citusNode) int {
	pool := e.Pool
	if n.host != "" {
		u, err := url.Parse(e.URL)
		if err != nil {
			return 0
		}
		u.Host = fmt.Sprintf("%s:%d", n.host, n.port)
		cfg, err := pgxpool.ParseConfig(u.String())
		if err != nil {
			return 0
		}
		cfg.MaxConns = 1
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return 0
		}
		defer pool.Close()
	}
	var dir string
	if err := pool.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dir); err != nil {
		return 0
	}
	return postmasterPID(dir)
}

// cpuSample is the CPU time (ns) of each node's server (its postmaster and every
// backend) and of this process, at one moment.
type cpuSample struct {
	nodes []int64 // by node, -1 where unknown
	self  int64
}

func sampleCPU(nodes []citusNode) cpuSample {
	s := cpuSample{nodes: make([]int64, len(nodes)), self: selfCPU()}
	for i, n := range nodes {
		s.nodes[i] = treeCPU(n.pid)
	}
	return s
}

// cnRun is one of CN's passes: W5's shape on the cluster with the jobs over keys,
// and each node's CPU per job.
type cnRun struct {
	res     *Result
	perJob  []float64 // CPU µs per job, by node (-1: unknown)
	selfJob float64   // this process's CPU µs per job
}

func runCN(ctx context.Context, e *Env) (*Result, error) {
	cl, err := e.cluster("CN")
	if err != nil {
		return nil, err
	}
	nodes, err := citusNodes(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("CN: %w", err)
	}
	if len(nodes) < 2 {
		return nil, errors.New("CN: the cluster has no active worker node")
	}
	keys := max(cl.Keys, 1)
	n := e.n(50000)
	pass := func(name string, pick func(ctx context.Context, schema string) ([]string, error)) (*cnRun, error) {
		var before cpuSample
		var out cnRun
		r, err := isolatedValue(ctx, cl, func() (*Result, error) {
			r, _, err := work(ctx, cl, workOpts{name: name, n: n, workers: W5Workers, deleteOnSuccess: true, keysFor: pick,
				clock: func(started bool) {
					if !started {
						before = sampleCPU(nodes)
						return
					}
					after := sampleCPU(nodes)
					out.perJob = make([]float64, len(nodes))
					for i := range nodes {
						out.perJob[i] = -1
						if before.nodes[i] >= 0 && after.nodes[i] >= 0 {
							out.perJob[i] = float64(after.nodes[i]-before.nodes[i]) / 1e3 / float64(n)
						}
					}
					out.selfJob = -1
					if before.self >= 0 && after.self >= 0 {
						out.selfJob = float64(after.self-before.self) / 1e3 / float64(n)
					}
				}})
			return r, err
		})
		out.res = r
		return &out, err
	}
	first := nodes[1]
	one, err := pass("CN1", func(ctx context.Context, schema string) ([]string, error) {
		return keysOnNode(ctx, cl, schema, first, keys)
	})
	if err != nil {
		return nil, fmt.Errorf("CN: every key on %s: %w", first.name, err)
	}
	spread, err := pass("CNA", func(context.Context, string) ([]string, error) {
		out := make([]string, keys)
		for i := range out {
			out[i] = "tenant-" + strconv.Itoa(i)
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("CN: keys over every node: %w", err)
	}
	return cnResult(cl, nodes, keys, one, spread), nil
}

// cnResult is CN's report and its model.
func cnResult(cl *Env, nodes []citusNode, keys int, one, spread *cnRun) *Result {
	r := &Result{Workload: "CN", N: spread.res.N, Seconds: one.res.Seconds + spread.res.Seconds, JobsPerSec: spread.res.JobsPerSec,
		Settings: cl.Settings, Verified: "one node: " + one.res.Verified + "; every node: " + spread.res.Verified,
		Extra: map[string]any{
			"one_node": fmt.Sprintf("%s jobs/s with all %d keys on %s (%s)", thousands(one.res.JobsPerSec), keys, nodes[1].name, cpuLine(nodes, one)),
			"all_nodes": fmt.Sprintf("%s jobs/s with %d keys over %d worker nodes (%s)", thousands(spread.res.JobsPerSec), keys, len(nodes)-1,
				cpuLine(nodes, spread)),
			"batches_all_nodes": spread.res.Extra["batches"],
		}}
	m, ok := fitModel(one, spread)
	if !ok {
		r.Extra["model"] = "not computed: the nodes' CPU could not be read (the cluster runs elsewhere, or its data directories are not readable by this user)"
		return r
	}
	r.Extra["model"] = m.String()
	r.Extra["model_on_this_machine"] = fmt.Sprintf("everything on %d cores: %d / (%.0f + %.0f + %.0f µs) = %s jobs/s predicted, %s measured (every node)",
		m.cores, m.cores, m.coord, m.node, m.client, thousands(m.shared()), thousands(spread.res.JobsPerSec))
	var b strings.Builder
	for _, w := range []int{1, 2, 4, 8, 16} {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d: %s", w, thousands(m.predict(w)))
	}
	r.Extra["model_jobs_per_sec_by_worker_nodes"] = b.String() + fmt.Sprintf(" (each node, the coordinator and the client with %d cores of their own)", m.cores)
	return r
}

// cpuLine renders a pass's CPU per job by node.
func cpuLine(nodes []citusNode, p *cnRun) string {
	var b strings.Builder
	b.WriteString("CPU per job:")
	for i, n := range nodes {
		if p.perJob[i] < 0 {
			fmt.Fprintf(&b, " %s ?", n.name)
		} else {
			fmt.Fprintf(&b, " %s %.0f µs", n.name, p.perJob[i])
		}
		b.WriteString(",")
	}
	if p.selfJob >= 0 {
		fmt.Fprintf(&b, " the bench's client %.0f µs", p.selfJob)
	}
	return b.String()
}

// cnModel is CN's model of jobs/s per added worker node (docs/citus.md): every job
// costs the coordinator coord µs of CPU, the worker nodes together node µs (spread
// over them by key, each node taking its keys' share), and the client client µs.
// With w worker nodes of cores cores each, a coordinator and a client of as many,
//
//	jobs/s(w) = min(w·cores / node, cores / coord, cores / client) × 10⁶
//
// where node, coord and client are the CPU per job measured with the keys over every
// node (node: the worker nodes' sum). The first term is what the worker nodes
// sustain; the other two are ceilings that adding worker nodes does not lift.
type cnModel struct {
	cores               int
	coord, node, client float64 // CPU µs per job
	nodeOne             float64 // one worker node's CPU µs per job when it holds every key
}

func (m cnModel) predict(w int) float64 {
	per := func(us float64) float64 {
		if us <= 0 {
			return 1e12
		}
		return float64(m.cores) * 1e6 / us
	}
	return min(float64(w)*per(m.node), per(m.coord), per(m.client))
}

// shared is the model's rate with everything on one machine of m.cores cores.
func (m cnModel) shared() float64 {
	return float64(m.cores) * 1e6 / max(m.coord+m.node+m.client, 1e-9)
}

func (m cnModel) String() string {
	return fmt.Sprintf("jobs/s(w worker nodes) = min(w × cores / node, cores / coordinator, cores / client) with CPU µs per job node %.0f (the worker nodes' sum; %.0f on one node holding every key), coordinator %.0f, client %.0f: one worker node of %d cores sustains %s jobs/s; the coordinator caps the cluster at %s, the client at %s",
		m.node, m.nodeOne, m.coord, m.client, m.cores, thousands(m.predict(1)),
		thousands(float64(m.cores)*1e6/max(m.coord, 1e-9)), thousands(float64(m.cores)*1e6/max(m.client, 1e-9)))
}

// fitModel reads the model's inputs from CN's two passes.
func fitModel(one, spread *cnRun) (cnModel, bool) {
	m := cnModel{cores: numCPU()}
	if len(spread.perJob) < 2 || spread.selfJob < 0 {
		return m, false
	}
	for i, us := range spread.perJob {
		if us < 0 {
			return m, false
		}
		if i == 0 {
			m.coord = us
		} else {
			m.node += us
		}
	}
	m.client = spread.selfJob
	if len(one.perJob) > 1 && one.perJob[1] >= 0 {
		m.nodeOne = one.perJob[1]
	}
	return m, true
}

// keysOnNode returns want keys "tenant-N" whose shard of schema's jobs is placed on
// node.
func keysOnNode(ctx context.Context, c *Env, schema string, node citusNode, want int) ([]string, error) {
	rows, err := c.Pool.Query(ctx, `
SELECT k FROM (SELECT 'tenant-' || g AS k FROM generate_series(0, $4::int * 64) g) x
WHERE EXISTS (SELECT 1 FROM pg_dist_shard_placement p
              WHERE p.shardid = get_shard_id_for_distribution_column($1::regclass, x.k)
                AND p.nodename = $2 AND p.nodeport = $3)
LIMIT $4`, `"`+schema+`".jobs`, node.host, node.port, want)
	if err != nil {
		return nil, fmt.Errorf("placing keys on %s: %w", node.name, err)
	}
	keys, err := collectStrings(rows)
	if err != nil {
		return nil, err
	}
	if len(keys) < want {
		return nil, fmt.Errorf("found %d keys on %s, want %d", len(keys), node.name, want)
	}
	return keys, nil
}

func collectStrings(rows interface {
	Next() bool
	Scan(...any) error
	Close()
	Err() error
}) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// CQ's shape: the quiet keys, and how many rounds of one job each they enqueue, once
// on the empty queue (the control) and once behind the backlog.
const (
	cqQuietKeys = 10
	cqRounds    = 5
	cqBacklog   = 1000000
	cqLoadChunk = 10000
)

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

// cqRecorder is CQ's handler: it counts the backlog's runs and records each quiet
// job's start and how many of the backlog's jobs had started by then.
type cqRecorder struct {
	backlog int // jobs 0 … backlog−1 are key A's
	aRan    atomic.Int64
	mu      sync.Mutex
	started map[int]time.Time
	aAt     map[int]int64
	runs    map[int]int
	waiting map[int]chan struct{}
}

func (q *cqRecorder) handle(ctx context.Context, job *skiplock.Job) error {
	now := time.Now()
	i, ok := noopIndex(job.Payload)
	if !ok {
		return skiplock.Permanent(fmt.Errorf("CQ: payload %q carries no job index", job.Payload))
	}
	if i < q.backlog {
		q.aRan.Add(1)
		return nil
	}
	a := q.aRan.Load()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.runs[i]++
	if q.runs[i] == 1 {
		q.started[i], q.aAt[i] = now, a
		if ch := q.waiting[i]; ch != nil {
			close(ch)
		}
	}
	return nil
}

// cqRounds enqueues rounds of one job per quiet key, waits for each round's jobs to
// start, and returns each job's wait and how many of key A's jobs started meanwhile.
func cqQuiet(ctx context.Context, app *skiplock.Client, q *cqRecorder, first int) (*latencies, []int64, error) {
	lat := &latencies{}
	var behind []int64
	i := first
	for round := 0; round < cqRounds; round++ {
		type sent struct {
			i     int
			begin time.Time
			a     int64
			ch    chan struct{}
		}
		var batch []sent
		for k := 0; k < cqQuietKeys; k++ {
			ch := make(chan struct{})
			q.mu.Lock()
			q.waiting[i] = ch
			q.mu.Unlock()
			s := sent{i: i, begin: time.Now(), a: q.aRan.Load(), ch: ch}
			if _, err := app.Enqueue(ctx, noop{I: i}, &skiplock.EnqueueOpts{ConcurrencyKey: "quiet-" + strconv.Itoa(k)}); err != nil {
				return nil, nil, fmt.Errorf("CQ: enqueueing quiet job %d: %w", i, err)
			}
			batch = append(batch, s)
			i++
		}
		for _, s := range batch {
			select {
			case <-s.ch:
			case <-time.After(60 * time.Second):
				return nil, nil, fmt.Errorf("CQ: quiet job %d did not start within 60 s (%d of key A's jobs ran)", s.i, q.aRan.Load())
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			q.mu.Lock()
			lat.add(q.started[s.i].Sub(s.begin))
			behind = append(behind, q.aAt[s.i]-s.a)
			q.mu.Unlock()
		}
	}
	return lat, behind, nil
}

func runCQ(ctx context.Context, e *Env) (*Result, error) {
	cl, err := e.cluster("CQ")
	if err != nil {
		return nil, err
	}
	return isolatedValue(ctx, cl, func() (*Result, error) { return cqRun(ctx, cl) })
}

func cqRun(ctx context.Context, cl *Env) (*Result, error) {
	backlog := cl.n(cqBacklog)
	schema, err := cl.schema(ctx, "bench_cq")
	if err != nil {
		return nil, err
	}
	q := &cqRecorder{backlog: backlog, started: map[int]time.Time{}, aAt: map[int]int64{}, runs: map[int]int{}, waiting: map[int]chan struct{}{}}
	pool, err := cl.pool(ctx, 8)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	app, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	worker := func() (*skiplock.Client, error) {
		ws := skiplock.NewWorkers()
		if err := ws.AddHandler("noop", q.handle, nil); err != nil {
			return nil, err
		}
		c, err := skiplock.NewClient(pool, cl.clientConfig(skiplock.Config{Schema: schema, Workers: ws, DeleteOnSuccess: true,
			Queues: map[string]skiplock.QueueConfig{skiplock.DefaultQueue: {MaxWorkers: W5Workers}}}))
		if err != nil {
			return nil, err
		}
		return c, c.Start(ctx)
	}

	// The control: the quiet keys' pickup on an empty queue.
	w, err := worker()
	if err != nil {
		return nil, fmt.Errorf("CQ: starting the worker: %w", err)
	}
	control, _, err := cqQuiet(ctx, app, q, backlog)
	w.Stop(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}

	// Key A's backlog, in statements of cqLoadChunk, each on a connection of its own
	// (loadConn), then the worker on it.
	st, err := store.New(schema)
	if err != nil {
		return nil, err
	}
	loadStart := time.Now()
	var loaded atomic.Int64
	stop := cl.progress("CQ load", backlog, loaded.Load)
	for first := 0; first < backlog; first += cqLoadChunk {
		m := min(cqLoadChunk, backlog-first)
		var got int64
		err := cl.loadConn(ctx, func(db skiplock.DB) (err error) {
			got, err = st.BenchBurst(ctx, db, skiplock.DefaultQueue, "noop", "A", first, m)
			return err
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("CQ: loading key A's jobs: %w", err)
		}
		loaded.Add(got)
	}
	stop()
	load := time.Since(loadStart)
	if loaded.Load() != int64(backlog) {
		return nil, fmt.Errorf("CQ: loaded %d of key A's %d jobs", loaded.Load(), backlog)
	}
	if _, err := cl.Pool.Exec(ctx, `VACUUM ANALYZE "`+schema+`".jobs`); err != nil {
		return nil, err
	}
	w, err = worker()
	if err != nil {
		return nil, fmt.Errorf("CQ: starting the worker on the backlog: %w", err)
	}
	defer w.Stop(context.WithoutCancel(ctx))
	// Steady state first: the worker has been taking key A's jobs for a while.
	warm := int64(min(2000, backlog/10))
	for deadline := time.Now().Add(2 * time.Minute); q.aRan.Load() < warm; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("CQ: %d of key A's jobs ran in 2 minutes, want %d before the quiet keys", q.aRan.Load(), warm)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	aBefore := q.aRan.Load()
	t0 := time.Now()
	lat, behind, err := cqQuiet(ctx, app, q, backlog+cqQuietKeys*cqRounds)
	if err != nil {
		return nil, err
	}
	took := time.Since(t0)
	aRate := float64(q.aRan.Load()-aBefore) / took.Seconds()
	if err := w.Stop(ctx); err != nil {
		return nil, fmt.Errorf("CQ: stopping the worker: %w", err)
	}
	aDone := q.aRan.Load()
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, n := range q.runs {
		if n != 1 {
			return nil, fmt.Errorf("CQ: quiet job %d ran %d times", i, n)
		}
	}
	quiet := 2 * cqQuietKeys * cqRounds
	if len(q.runs) != quiet {
		return nil, fmt.Errorf("CQ: %d quiet jobs ran, want %d", len(q.runs), quiet)
	}
	var pending int64
	if err := cl.Pool.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".jobs WHERE concurrency_key = 'A' AND status = 'pending'`).Scan(&pending); err != nil {
		return nil, err
	}
	if pending+aDone > int64(backlog) {
		return nil, fmt.Errorf("CQ: %d of key A's jobs ran and %d are pending, more than the %d loaded", aDone, pending, backlog)
	}
	sort.Slice(behind, func(i, j int) bool { return behind[i] < behind[j] })
	r := &Result{Workload: "CQ", N: cqQuietKeys * cqRounds, Seconds: took.Seconds(), Settings: cl.Settings,
		Verified: fmt.Sprintf("ok: %d quiet jobs ran once each (%d with the empty queue, %d behind the backlog); %d of key A's ran, %d still pending",
			quiet, quiet/2, quiet/2, aDone, pending),
		Extra: map[string]any{
			"backlog":                             fmt.Sprintf("%s pending jobs of key A loaded in %s (INSERT … SELECT through the coordinator, 10,000 a statement, each on a new connection)", thousands(float64(backlog)), load.Round(time.Millisecond)),
			"quiet":                               fmt.Sprintf("%d rounds of one job on each of %d quiet keys, each round enqueued once the last started, with the worker (MaxWorkers %d) %s of key A's jobs in", cqRounds, cqQuietKeys, W5Workers, thousands(float64(aBefore))),
			"wait_behind_backlog_p50_p95_p99_max": pcts(lat) + fmt.Sprintf(", max %.2f ms", maxMs(lat)),
			"wait_empty_queue_p50_p95_p99_max":    pcts(control) + fmt.Sprintf(", max %.2f ms", maxMs(control)),
			"key_A_jobs_started_meanwhile":        fmt.Sprintf("median %d, max %d per quiet job (key A ran at %s jobs/s meanwhile)", behind[len(behind)/2], behind[len(behind)-1], thousands(aRate)),
		}}
	lat.fill(r)
	return r, nil
}

// maxMs is the largest of l's durations in milliseconds.
func maxMs(l *latencies) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, d := range l.d {
		m = max(m, d)
	}
	return float64(m.Microseconds()) / 1000
}
