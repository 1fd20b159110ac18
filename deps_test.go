package skiplock_test

import (
	"os/exec"
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
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var outside []string
	for _, word := range strings.Fields(string(out)) {
		ok := slices.Contains(outside, word) || slices.ContainsFunc(allowed, func(prefix string) bool {
			return strings.HasPrefix(word, prefix)
		})
		if !ok {
			outside = append(outside, word)
		}
	}
	return outside
}
