package validate

import (
	"strings"
	"testing"
)

func load(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := LoadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestManifests: every manifest of deploy/kubernetes decodes strictly into its
// Kubernetes type and the set follows the project's rules.
func TestManifests(t *testing.T) {
	t.Parallel()
	set, problems := Decode(load(t))
	problems = append(problems, Check(set)...)
	for _, p := range problems {
		t.Error(p)
	}
	if len(set.Deployments) < 4 || len(set.PDBs) < 4 || len(set.Scaled) != 1 || len(set.HPAs) != 1 {
		t.Errorf("found %d Deployments, %d PodDisruptionBudgets, %d ScaledObjects, %d HPAs; want the relay, dashboard, metrics and worker, each with a budget, and both autoscalers",
			len(set.Deployments), len(set.PDBs), len(set.Scaled), len(set.HPAs))
	}
}

// TestBrokenManifestsFail: each breakage of a real manifest is reported, so the check
// above cannot pass by checking nothing.
func TestBrokenManifestsFail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file, old, new, want string
	}{
		{"a misspelt field", "relay.yaml", "readinessProbe:", "readinesProbe:", `unknown field "readinesProbe"`},
		{"a bad quantity", "worker.yaml", "memory: 128Mi", "memory: 128 MB", "quantities must match"},
		{"not YAML", "metrics.yaml", "replicas: 1", "replicas: [1", "document 1"},
		{"an unknown kind", "hpa.yaml", "kind: HorizontalPodAutoscaler", "kind: HorizontalPodAutoscalr", "unknown apiVersion and kind"},
		{"no readiness probe", "dashboard.yaml", "          readinessProbe:\n            httpGet: {path: /readyz, port: http}\n            periodSeconds: 10\n            timeoutSeconds: 5\n", "", "no HTTP readiness probe"},
		{"the wrong probe path", "metrics.yaml", "path: /healthz, port: metrics", "path: /metrics, port: metrics", `asks "/metrics", want /healthz`},
		{"a probe on a port metrics does not serve", "metrics.yaml", `"--listen", ":9187"`, `"--listen", ":9188"`, "is not the --listen port 9188"},
		{"a probe on a port metrics does not serve, by the deprecated flag", "metrics.yaml", `"--listen", ":9187"`, `"--addr", ":9188"`, "is not the --addr port 9188"},
		{"a probe on a port the relay does not serve", "relay.yaml", `"--health-addr", ":8081"`, `"--health-addr", ":8082"`, "is not the --health-addr port 8082"},
		{"a grace period shorter than the drain", "worker.yaml", "terminationGracePeriodSeconds: 25", "terminationGracePeriodSeconds: 20", "is not 5s longer than SKIPLOCK_SHUTDOWN_TIMEOUT (20s)"},
		{"a drain longer than the grace period", "worker.yaml", "value: 20s", "value: 1m", "SKIPLOCK_SHUTDOWN_TIMEOUT (1m0s)"},
		{"a bad drain", "worker.yaml", "value: 20s", "value: soon", `SKIPLOCK_SHUTDOWN_TIMEOUT "soon" is not a positive Go duration`},
		{"a relay lease past the grace period", "relay.yaml", `"--lease", "30s"`, `"--lease", "1m"`, "the relay's --lease (1m0s)"},
		{"no requests", "dashboard.yaml", "requests: {cpu: 50m, memory: 64Mi}", "requests: {memory: 64Mi}", "requests no cpu or memory"},
		{"root", "metrics.yaml", "runAsUser: 65532", "runAsUser: 0", "runAsNonRoot and a numeric, non-zero runAsUser"},
		{"no budget", "worker.yaml", "      app.kubernetes.io/name: shop-worker\nEOF", "      app.kubernetes.io/name: someone-else\nEOF", "Deployment shop-worker: no PodDisruptionBudget"},
		{"a budget that blocks drains", "relay.yaml", "minAvailable: 1", "minAvailable: 2", "lets no pod be evicted"},
		{"a missing secret key", "relay.yaml", "key: relay-url", "key: relay-uri", `reads key "relay-uri" of secret skiplock`},
		{"KEDA scales nothing", "keda-scaledobject.yaml", "    name: shop-worker\n  pollingInterval", "    name: shop-wrker\n  pollingInterval", `scaleTargetRef "shop-wrker" is no Deployment`},
		{"KEDA counts the table", "keda-scaledobject.yaml", "SELECT skiplock.queue_depth('default')", "SELECT count(*) FROM skiplock.jobs", "does not call skiplock's queue_depth"},
		{"KEDA without a target", "keda-scaledobject.yaml", `targetQueryValue: "100"`, `targetQueryValue: "lots"`, "is not a positive number"},
		{"the HPA on another metric", "hpa.yaml", "name: skiplock_queue_depth", "name: skiplock_jobs_due", "scales on no skiplock_queue_depth"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			files := load(t)
			text := string(files[c.file]) + "EOF"
			if !strings.Contains(text, c.old) {
				t.Fatalf("%s does not contain %q: update the test", c.file, c.old)
			}
			files[c.file] = []byte(strings.TrimSuffix(strings.Replace(text, c.old, c.new, 1), "EOF"))
			set, problems := Decode(files)
			problems = append(problems, Check(set)...)
			if !containsProblem(problems, c.want) {
				t.Errorf("breaking %s (%s): want a problem containing %q, got:\n%s", c.file, c.name, c.want, strings.Join(problems, "\n"))
			}
		})
	}
}

func containsProblem(problems []string, want string) bool {
	for _, p := range problems {
		if strings.Contains(p, want) {
			return true
		}
	}
	return false
}
