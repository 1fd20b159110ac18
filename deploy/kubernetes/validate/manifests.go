// Package validate checks the example Kubernetes manifests of deploy/kubernetes: each
// document decodes strictly (no unknown or duplicate field, valid quantities) into
// the Kubernetes API type of its kind, and together they follow the project's rules
// (docs/operations.md, "Deploying"). It is a module of its own so that the library's
// go.mod never requires the Kubernetes API.
package validate

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// ScaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) the manifests
// use; KEDA's Go module is not needed to check them. Decoding is strict, so a field
// outside this subset fails until it is added here.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval int `json:"pollingInterval"`
		CooldownPeriod  int `json:"cooldownPeriod"`
		MinReplicaCount int `json:"minReplicaCount"`
		MaxReplicaCount int `json:"maxReplicaCount"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef struct {
				Name string `json:"name"`
			} `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

// TriggerAuthentication is the part of KEDA's TriggerAuthentication the manifests use.
type TriggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// Set is every object of the manifests, by kind.
type Set struct {
	Deployments []*appsv1.Deployment
	Services    []*corev1.Service
	Secrets     []*corev1.Secret
	PDBs        []*policyv1.PodDisruptionBudget
	Jobs        []*batchv1.Job
	HPAs        []*autoscalingv2.HorizontalPodAutoscaler
	Scaled      []*ScaledObject
	TriggerAuth []*TriggerAuthentication
}

// LoadDir reads every .yaml file of dir.
func LoadDir(dir string) (map[string][]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no .yaml files in %s", dir)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files[filepath.Base(p)] = b
	}
	return files, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// Decode decodes every document of files strictly into its kind's type.
func Decode(files map[string][]byte) (*Set, []string) {
	set := &Set{}
	var problems []string
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for i, doc := range docSeparator.Split(string(files[name]), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			where := fmt.Sprintf("%s, document %d", name, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			newObj := kinds(set)[tm.APIVersion+" "+tm.Kind]
			if newObj == nil {
				problems = append(problems, fmt.Sprintf("%s: unknown apiVersion and kind %q %q", where, tm.APIVersion, tm.Kind))
				continue
			}
			obj := newObj()
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				problems = append(problems, fmt.Sprintf("%s (%s): %v", where, tm.Kind, err))
			}
		}
	}
	return set, problems
}

// kinds maps each apiVersion and kind the manifests may hold to a function that
// adds a new object of its type to set and returns it, for decoding into.
func kinds(set *Set) map[string]func() any {
	return map[string]func() any{
		"apps/v1 Deployment":                     func() any { return add(&set.Deployments) },
		"v1 Service":                             func() any { return add(&set.Services) },
		"v1 Secret":                              func() any { return add(&set.Secrets) },
		"policy/v1 PodDisruptionBudget":          func() any { return add(&set.PDBs) },
		"batch/v1 Job":                           func() any { return add(&set.Jobs) },
		"autoscaling/v2 HorizontalPodAutoscaler": func() any { return add(&set.HPAs) },
		"keda.sh/v1alpha1 ScaledObject":          func() any { return add(&set.Scaled) },
		"keda.sh/v1alpha1 TriggerAuthentication": func() any { return add(&set.TriggerAuth) },
	}
}

// add appends a new T to list and returns it.
func add[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// skiplockImage is how the manifests name the image of the Containerfile.
const skiplockImage = "registry.example.com/skiplock:"

// Check returns what breaks the project's rules in set.
func Check(set *Set) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	secretKeys := map[string]bool{}
	for _, s := range set.Secrets {
		for k := range s.StringData {
			secretKeys[s.Name+"/"+k] = true
		}
		for k := range s.Data {
			secretKeys[s.Name+"/"+k] = true
		}
	}
	deployments := map[string]*appsv1.Deployment{}
	for _, d := range set.Deployments {
		deployments[d.Name] = d
		where := "Deployment " + d.Name
		tpl := d.Spec.Template
		if d.Spec.Selector == nil || !subset(d.Spec.Selector.MatchLabels, tpl.Labels) {
			bad("%s: its selector does not match its pod template's labels", where)
		}
		if !coveredByPDB(set.PDBs, tpl.Labels) {
			bad("%s: no PodDisruptionBudget selects its pods", where)
		}
		checkPod(where, tpl.Spec, secretKeys, bad)
		for _, c := range tpl.Spec.Containers {
			checkProbes(where+", container "+c.Name, c, bad)
			checkTiming(where+", container "+c.Name, tpl.Spec, c, bad)
		}
	}
	for _, j := range set.Jobs {
		checkPod("Job "+j.Name, j.Spec.Template.Spec, secretKeys, bad)
	}
	for _, pdb := range set.PDBs {
		if pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
			bad("PodDisruptionBudget %s: sets neither minAvailable nor maxUnavailable", pdb.Name)
		}
		if pdb.Spec.MinAvailable != nil {
			for _, d := range set.Deployments {
				if pdb.Spec.Selector != nil && subset(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) &&
					d.Spec.Replicas != nil && pdb.Spec.MinAvailable.Type == intstr.Int && int32(pdb.Spec.MinAvailable.IntValue()) >= *d.Spec.Replicas {
					bad("PodDisruptionBudget %s: minAvailable %d of %d replicas of %s lets no pod be evicted (a node drain would hang)",
						pdb.Name, pdb.Spec.MinAvailable.IntValue(), *d.Spec.Replicas, d.Name)
				}
			}
		}
	}
	auths := map[string]bool{}
	for _, a := range set.TriggerAuth {
		auths[a.Name] = true
		for _, r := range a.Spec.SecretTargetRef {
			if !secretKeys[r.Name+"/"+r.Key] {
				bad("TriggerAuthentication %s: secret %s has no key %q", a.Name, r.Name, r.Key)
			}
		}
	}
	for _, s := range set.Scaled {
		where := "ScaledObject " + s.Name
		if deployments[s.Spec.ScaleTargetRef.Name] == nil {
			bad("%s: scaleTargetRef %q is no Deployment of the manifests", where, s.Spec.ScaleTargetRef.Name)
		}
		if s.Spec.MinReplicaCount > s.Spec.MaxReplicaCount || s.Spec.MaxReplicaCount < 1 {
			bad("%s: replica bounds %d..%d", where, s.Spec.MinReplicaCount, s.Spec.MaxReplicaCount)
		}
		if len(s.Spec.Triggers) == 0 {
			bad("%s: no trigger", where)
		}
		for _, t := range s.Spec.Triggers {
			if t.Type != "postgresql" {
				bad("%s: trigger type %q, want postgresql", where, t.Type)
			}
			if !depthQuery.MatchString(t.Metadata["query"]) {
				bad("%s: query %q does not call skiplock's queue_depth function", where, t.Metadata["query"])
			}
			if n, err := strconv.ParseFloat(t.Metadata["targetQueryValue"], 64); err != nil || n <= 0 {
				bad("%s: targetQueryValue %q is not a positive number", where, t.Metadata["targetQueryValue"])
			}
			if !auths[t.AuthenticationRef.Name] {
				bad("%s: authenticationRef %q is no TriggerAuthentication of the manifests", where, t.AuthenticationRef.Name)
			}
		}
	}
	for _, h := range set.HPAs {
		where := "HorizontalPodAutoscaler " + h.Name
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || deployments[h.Spec.ScaleTargetRef.Name] == nil {
			bad("%s: scaleTargetRef %s %q is no Deployment of the manifests", where, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
		uses := false
		for _, m := range h.Spec.Metrics {
			uses = uses || m.External != nil && m.External.Metric.Name == "skiplock_queue_depth"
		}
		if !uses {
			bad("%s: scales on no skiplock_queue_depth external metric", where)
		}
	}
	return p
}

// depthQuery is a query that calls the queue_depth function of some schema.
var depthQuery = regexp.MustCompile(`(?i)^\s*SELECT\s+("?[a-z_][a-z0-9_$]*"?\.)?queue_depth\(`)

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func coveredByPDB(pdbs []*policyv1.PodDisruptionBudget, labels map[string]string) bool {
	return slices.ContainsFunc(pdbs, func(p *policyv1.PodDisruptionBudget) bool {
		return p.Spec.Selector != nil && subset(p.Spec.Selector.MatchLabels, labels)
	})
}

// checkPod: a non-root numeric user, resource requests and memory limits, and secrets
// that exist.
func checkPod(where string, spec corev1.PodSpec, secretKeys map[string]bool, bad func(string, ...any)) {
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		bad("%s: the pod must set runAsNonRoot and a numeric, non-zero runAsUser (the image's user is 65532)", where)
	}
	for _, c := range spec.Containers {
		cw := where + ", container " + c.Name
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			bad("%s: requests no cpu or memory", cw)
		}
		if c.Resources.Limits.Memory().IsZero() {
			bad("%s: has no memory limit", cw)
		}
		for _, e := range c.Env {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !secretKeys[r.SecretKeyRef.Name+"/"+r.SecretKeyRef.Key] {
				bad("%s: env %s reads key %q of secret %s, which the manifests do not define", cw, e.Name, r.SecretKeyRef.Key, r.SecretKeyRef.Name)
			}
		}
	}
}

// checkProbes: liveness on /healthz, readiness on /readyz, both on a port the
// container declares and, for the skiplock image, the port its command serves them on.
func checkProbes(where string, c corev1.Container, bad func(string, ...any)) {
	for _, pr := range []struct {
		name, path string
		probe      *corev1.Probe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			bad("%s: no HTTP %s probe", where, pr.name)
			continue
		}
		if pr.probe.HTTPGet.Path != pr.path {
			bad("%s: the %s probe asks %q, want %s", where, pr.name, pr.probe.HTTPGet.Path, pr.path)
		}
		port, ok := containerPort(c, pr.probe.HTTPGet.Port)
		if !ok {
			bad("%s: the %s probe's port %s is not a port of the container", where, pr.name, pr.probe.HTTPGet.Port.String())
			continue
		}
		if strings.HasPrefix(c.Image, skiplockImage) {
			if serves, flag := servesOn(c.Args); flag == "" {
				bad("%s: the skiplock command %q serves no probes (relay: --health-addr; dashboard and metrics: --listen)", where, strings.Join(c.Args, " "))
			} else if serves != port {
				bad("%s: the %s probe's port %d is not the %s port %d", where, pr.name, port, flag, serves)
			}
		}
	}
}

func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// servesOn returns the port a skiplock command serves /healthz and /readyz on, and
// the flag that says so ("" when it serves none).
func servesOn(args []string) (int32, string) {
	flags := map[string]string{"relay": "--health-addr", "dashboard": "--listen", "metrics": "--listen"}
	if len(args) == 0 || flags[args[0]] == "" {
		return 0, ""
	}
	flag := flags[args[0]]
	addr := flagValue(args, flag)
	if addr == "" && args[0] == "metrics" {
		if addr = flagValue(args, "--addr"); addr != "" { // its deprecated name
			flag = "--addr"
		}
	}
	if addr == "" {
		if args[0] == "metrics" {
			addr = ":9187" // its default
		} else {
			return 0, ""
		}
	}
	_, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		return -1, flag
	}
	return int32(n), flag
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// shutdownMargin is how much longer than the drain terminationGracePeriodSeconds must
// be: the handing back of unfinished jobs and the process's exit.
const shutdownMargin = 5 * time.Second

// checkTiming: Kubernetes kills a pod terminationGracePeriodSeconds after SIGTERM, so
// that must outlast the worker's drain (SKIPLOCK_SHUTDOWN_TIMEOUT, read into
// Config.ShutdownTimeout; 20s when unset, the library's default) and the relay's
// lease (--lease, 30s by default).
func checkTiming(where string, spec corev1.PodSpec, c corev1.Container, bad func(string, ...any)) {
	grace := 30 * time.Second // Kubernetes' default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	need, what := time.Duration(0), ""
	for _, e := range c.Env {
		if e.Name == "SKIPLOCK_SHUTDOWN_TIMEOUT" {
			d, err := time.ParseDuration(e.Value)
			if err != nil || d <= 0 {
				bad("%s: SKIPLOCK_SHUTDOWN_TIMEOUT %q is not a positive Go duration", where, e.Value)
				return
			}
			need, what = d, "SKIPLOCK_SHUTDOWN_TIMEOUT"
		}
	}
	if strings.HasPrefix(c.Image, skiplockImage) && len(c.Args) > 0 && c.Args[0] == "relay" {
		need, what = 30*time.Second, "the relay's --lease"
		if v := flagValue(c.Args, "--lease"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				bad("%s: --lease %q is not a Go duration", where, v)
				return
			}
			need = d
		}
	}
	if what == "" && !strings.HasPrefix(c.Image, skiplockImage) {
		need, what = 20*time.Second, "Config.ShutdownTimeout's default (no SKIPLOCK_SHUTDOWN_TIMEOUT)"
	}
	if what != "" && grace < need+shutdownMargin {
		bad("%s: terminationGracePeriodSeconds %s is not %s longer than %s (%s): Kubernetes would kill running jobs",
			where, grace, shutdownMargin, what, need)
	}
}
