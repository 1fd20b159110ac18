package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

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
