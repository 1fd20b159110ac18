package skiplock_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The root package is what every user compiles: it may depend on pgx and the
// standard library only — no broker client, Prometheus, OpenTelemetry or CLI module.
// One exception, deliberate: github.com/robfig/cron/v3, the de-facto Go cron parser
// the periodic scheduler uses (internal/maint). It has no dependencies of its own, so
// it adds one small module and nothing heavy; parsing cron by hand would be the
// riskier choice.
func TestRootPackageDependencies(t *testing.T) {
	t.Parallel()
	for _, pkg := range goListOutside(t, []string{"-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/skiplock/skiplock"},
		"github.com/skiplock/skiplock", "github.com/jackc/", "golang.org/x/text/", "golang.org/x/sync/", "github.com/robfig/cron/v3") {
		t.Errorf("the root package depends on %s", pkg)
	}
}

// go mod tidy in a module that imports skiplock and outbox records every module that
// the two packages and their tests import (docs/architecture.md, "What a user's module
// pays"). So their tests, like their code, import no broker client, Prometheus,
// OpenTelemetry or CLI module: the adapters' tests live in outbox/internal/badinput.
func TestUserModuleRecordsNoBrokerModule(t *testing.T) {
	t.Parallel()
	for _, mod := range goListOutside(t, []string{"-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}",
		"github.com/skiplock/skiplock", "github.com/skiplock/skiplock/outbox"},
		"github.com/skiplock/skiplock", "github.com/jackc/", "golang.org/x/text", "golang.org/x/sync",
		"github.com/robfig/cron/v3", "go.uber.org/goleak") {
		t.Errorf("the root package or outbox, or their tests, import a package of module %s", mod)
	}
}

// goListOutside runs go list with args and returns, once each, the words it prints
// that start with none of the allowed prefixes.
func goListOutside(t *testing.T, args []string, allowed ...string) []string {
	t.Helper()
	out := runGo(t, "", nil, append([]string{"list"}, args...)...)
	var outside []string
	for _, word := range strings.Fields(out) {
		ok := slices.Contains(outside, word) || slices.ContainsFunc(allowed, func(prefix string) bool {
			return strings.HasPrefix(word, prefix)
		})
		if !ok {
			outside = append(outside, word)
		}
	}
	return outside
}

// userModuleEnv, set to 1 (scripts/test.sh does), runs TestUserModuleRunsTheCLIAsATool:
// it builds the whole CLI outside this module's build flags, which takes a minute on
// a cold build cache.
const userModuleEnv = "SKIPLOCK_TEST_USER_MODULE"

// The documented way to pin the CLI inside an application's module (README,
// docs/operations.md): `go get -tool`, which survives `go mod tidy` — go.sum keeps
// the entries of modules only the CLI needs (cobra, the broker clients), where a
// plain `go run …/cmd/skiplock` fails after tidy drops them. A scratch module stands
// for the user's, with skiplock replaced by this checkout.
func TestUserModuleRunsTheCLIAsATool(t *testing.T) {
	t.Parallel()
	get := readmeToolInstall(t)
	if os.Getenv(userModuleEnv) == "" {
		t.Skipf("set %s=1 to build the CLI in a scratch user module (scripts/test.sh does)", userModuleEnv)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// The module cache must hold this module's dependencies for the offline step
	// below; through the proxy, a no-op when it does.
	runGo(t, root, nil, "mod", "download")

	dir := t.TempDir()
	gomod := "module example.com/userapp\n\ngo 1.26.0\n\n" +
		"require github.com/skiplock/skiplock v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/skiplock/skiplock => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum")) // the hashes this module trusts, instead of the checksum database
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// GOPROXY=off for the get alone: it asks the proxy whether .../cmd/skiplock is
	// a module of its own, which a replaced, unpublished module cannot answer.
	runGo(t, dir, []string{"GOFLAGS=-mod=mod", "GOPROXY=off"}, get...)
	runGo(t, dir, []string{"GOFLAGS=-mod=mod"}, "mod", "tidy")
	if mod, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !bytes.Contains(mod, []byte("\ntool github.com/skiplock/skiplock/cmd/skiplock\n")) {
		t.Errorf("go.mod after go get -tool and go mod tidy lacks the tool directive:\n%s", mod)
	}
	if sum, _ := os.ReadFile(filepath.Join(dir, "go.sum")); !bytes.Contains(sum, []byte("github.com/spf13/cobra ")) {
		t.Errorf("go.sum after go mod tidy lacks cobra, which the CLI needs:\n%s", sum)
	}
	if out := runGo(t, dir, []string{"GOFLAGS=-mod=mod"}, "tool", "skiplock", "version"); !strings.HasPrefix(out, "skiplock ") {
		t.Errorf("go tool skiplock version printed %q", out)
	}
	if out := runGo(t, dir, []string{"GOFLAGS=-mod=mod"}, "tool", "skiplock", "--help"); !strings.Contains(out, "migrate") {
		t.Errorf("go tool skiplock --help does not list migrate:\n%s", out)
	}
}

// readmeToolInstall returns the arguments of the README's `go get -tool …` line,
// without its version (the scratch module replaces skiplock with this checkout).
func readmeToolInstall(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(readme)) {
		if cmd, ok := strings.CutPrefix(line, "go get -tool "); ok {
			pkg, _, _ := strings.Cut(strings.Fields(cmd)[0], "@")
			return []string{"get", "-tool", pkg}
		}
	}
	t.Fatal("README.md shows no `go get -tool github.com/skiplock/skiplock/cmd/skiplock@…` line: document the install this test runs")
	return nil
}

// runGo runs the go command in dir (the test's own directory when "") outside any
// workspace, with env added, and returns its standard output; it fails the test with
// the command's standard error.
func runGo(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), cmd.Dir, err, stderr.Bytes())
	}
	return string(out)
}
