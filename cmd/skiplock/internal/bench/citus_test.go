package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func names(ws []Workload) string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return strings.Join(out, ",")
}

// On a Citus coordinator "all" is the workloads that run on the layout (without the
// long CQ), a named workload that does not is refused by name, and no single-node
// baseline is added.
func TestSelectCitus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ spec, want, err string }{
		{"all", "W3,W5,W6,CN", ""},
		{"", "W3,W5,W6,CN", ""},
		{"w3, W5", "W3,W5", ""},
		{"W6,CQ", "W6,CQ", ""},
		{"W3,W7", "", "W7 does not run on the Citus layout"},
		{"C1", "", "C1 does not run on the Citus layout"},
		{"W99", "", `unknown workload "W99"`},
	} {
		ws, err := SelectCitus(c.spec)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("SelectCitus(%q) = %v, want an error with %q", c.spec, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("SelectCitus(%q): %v", c.spec, err)
		case c.err == "" && names(ws) != c.want:
			t.Errorf("SelectCitus(%q) = %s, want %s", c.spec, names(ws), c.want)
		}
	}
	// On a plain node the cluster workloads run only when named, and alone.
	all, err := Select("all")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := NeedsCluster(all); c {
		t.Fatalf(`"all" on a plain node includes a cluster workload: %s`, names(all))
	}
	for spec, want := range map[string][2]bool{"C1": {true, true}, "ch": {true, true}, "CN": {true, false}, "CQ,W5": {true, false}, "W3": {false, false}} {
		ws, err := Select(spec)
		if err != nil {
			t.Fatal(err)
		}
		if c, p := NeedsCluster(ws); c != want[0] || p != want[1] {
			t.Errorf("NeedsCluster(%s) = %v, %v, want %v", names(ws), c, p, want)
		}
		if spec == "C1" && names(ws) != "C1" {
			t.Errorf("Select(C1) = %s: C1 measures its own references", names(ws))
		}
	}
}

func TestKeyName(t *testing.T) {
	t.Parallel()
	e := &Env{Keys: 3}
	for i, want := range []string{"tenant-0", "tenant-1", "tenant-2", "tenant-0"} {
		if got := e.key(i); got != want {
			t.Errorf("key(%d) = %q, want %q", i, got, want)
		}
	}
	if got := e.key(-1); got != "tenant-2" {
		t.Errorf("key(-1) = %q (a warm-up job's index), want tenant-2", got)
	}
	if got := (&Env{}).key(5); got != "" {
		t.Errorf("no keys: key(5) = %q, want none", got)
	}
}

// The model: the worker nodes' term grows with each node, the coordinator's and the
// client's are ceilings; on one machine everything shares its cores.
func TestCNModel(t *testing.T) {
	t.Parallel()
	one := &cnRun{res: &Result{N: 100, JobsPerSec: 900, Seconds: 1, Verified: "ok"}, perJob: []float64{90, 120, 10}, selfJob: 40}
	spread := &cnRun{res: &Result{N: 100, JobsPerSec: 1000, Seconds: 1, Verified: "ok"}, perJob: []float64{80, 60, 40}, selfJob: 20}
	m, ok := fitModel(one, spread)
	if !ok {
		t.Fatal("fitModel refused complete figures")
	}
	if m.coord != 80 || m.node != 100 || m.client != 20 || m.nodeOne != 120 {
		t.Fatalf("model inputs %+v", m)
	}
	m.cores = 2
	// node: 2e6/100 = 20,000 per worker node; coordinator: 2e6/80 = 25,000; client 100,000.
	for w, want := range map[int]float64{1: 20000, 2: 25000, 8: 25000} {
		if got := m.predict(w); math.Abs(got-want) > 0.5 {
			t.Errorf("predict(%d) = %.1f, want %.0f", w, got, want)
		}
	}
	if got := m.shared(); math.Abs(got-2e6/200) > 0.5 {
		t.Errorf("shared() = %.1f, want 10,000", got)
	}
	if _, ok := fitModel(one, &cnRun{res: spread.res, perJob: []float64{80, -1, 40}, selfJob: 20}); ok {
		t.Error("fitModel accepted a node whose CPU was not read")
	}
	nodes := []citusNode{{name: "coordinator"}, {name: "w1"}, {name: "w2"}}
	r := cnResult(&Env{Settings: "s"}, nodes, 64, one, spread)
	for _, k := range []string{"one_node", "all_nodes", "model", "model_on_this_machine", "model_jobs_per_sec_by_worker_nodes"} {
		if _, ok := r.Extra[k]; !ok {
			t.Errorf("CN's report has no %s: %v", k, r.Extra)
		}
	}
	if s := fmt.Sprint(r.Extra["model_jobs_per_sec_by_worker_nodes"]); !strings.HasPrefix(s, "1: 20,000, 2: 25,000") {
		t.Errorf("model by nodes: %s", s)
	}
	r = cnResult(&Env{}, nodes, 64, one, &cnRun{res: spread.res, perJob: []float64{-1, -1, -1}, selfJob: -1})
	if s := fmt.Sprint(r.Extra["model"]); !strings.HasPrefix(s, "not computed") {
		t.Errorf("model without CPU figures: %s", s)
	}
}

func TestC1Report(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	plain := &Env{Pool: pool, Settings: "plain"}
	cl := &Env{Pool: pool, Settings: "cluster", Keys: 64}
	pairs := []c1Pair{
		{"W3", &Result{JobsPerSec: 60000}, &Result{JobsPerSec: 6000}},
		{"W5", &Result{N: 50000, JobsPerSec: 40000, Verified: "ok a"}, &Result{N: 50000, JobsPerSec: 10000, Verified: "ok b", Extra: map[string]any{"batches": "x"}}},
		{"W6", &Result{P50ms: 1, P95ms: 2, P99ms: 4}, &Result{P50ms: 3, P95ms: 6, P99ms: 8}},
	}
	r := c1Result(context.Background(), plain, cl, pairs, 0)
	if r.Ratio != 0.25 || r.JobsPerSec != 10000 || r.Limit != "W5 on the plain node" {
		t.Fatalf("C1's own figure is W5's ratio: %+v", r)
	}
	if got := r.Extra["W3"]; got != "plain 60,000 jobs/s, cluster 6,000 jobs/s, cluster/plain 0.10×" {
		t.Errorf("W3: %v", got)
	}
	if got := fmt.Sprint(r.Extra["W6"]); !strings.Contains(got, "p50 3.00×, p99 2.00×") {
		t.Errorf("W6: %v", got)
	}
	if _, ok := r.Extra["warning"]; ok {
		t.Errorf("one server, yet a settings warning: %v", r.Extra["warning"])
	}
	if !strings.Contains(r.Settings, "plain node and coordinator: fsync=") {
		t.Errorf("settings: %s", r.Settings)
	}
	if _, _, err := (&Env{}).plainAndClusterEnvs("C1"); err == nil || !strings.Contains(err.Error(), "--citus-url") {
		t.Errorf("C1 without a cluster: %v", err)
	}
	if _, err := (&Env{}).cluster("CQ"); err == nil || !strings.Contains(err.Error(), "--citus-url") {
		t.Errorf("CQ without a cluster: %v", err)
	}
	if got := thousands(1234567.4); got != "1,234,567" {
		t.Errorf("thousands = %s", got)
	}
}

// The cluster workloads end to end on the real cluster (SKIPLOCK_TEST_CITUS_URL), at
// a tiny scale: C1 runs W3, W5 and W6 on the plain node and on the distributed layout,
// each verifying its jobs; CH, CN and CQ report their figures.
func TestCitusClusterWorkloads(t *testing.T) {
	url := pgtest.CitusURL(t)
	cl := &Env{Pool: pgtest.CitusPool(t), URL: url, Settings: "test cluster", Scale: 0.002, Citus: true, Keys: 8, DeleteOnSuccess: true}
	e := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.002, Cluster: cl}
	ctx := context.Background()
	for _, name := range []string{"C1", "CH", "CN", "CQ"} {
		ws, err := Select(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ws[0].Run(ctx, e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.HasPrefix(r.Verified, "ok") && !strings.HasPrefix(r.Verified, "plain ok") && !strings.HasPrefix(r.Verified, "one node: ok") {
			t.Fatalf("%s: not verified: %q", name, r.Verified)
		}
		switch name {
		case "C1":
			for _, k := range []string{"W3", "W5", "W6"} {
				if _, ok := r.Extra[k]; !ok {
					t.Errorf("C1 has no %s: %v", k, r.Extra)
				}
			}
		case "CH":
			for _, s := range chStatements {
				if v := fmt.Sprint(r.Extra["hop_"+s]); !strings.HasPrefix(v, "median plain") {
					t.Errorf("CH %s: %q", s, v)
				}
			}
		case "CN":
			if r.JobsPerSec <= 0 || r.Extra["model"] == nil {
				t.Errorf("CN: %+v", r)
			}
		case "CQ":
			if r.P99ms <= 0 || r.N != cqQuietKeys*cqRounds {
				t.Errorf("CQ: %+v", r)
			}
		}
	}
	// The schemas are gone with their workloads.
	var left int
	if err := cl.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench\_%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d bench schemas left on the cluster", left)
	}
}
