package skiplock_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The root package is what every user compiles: it may depend on pgx and the
// standard library only — no broker client, Prometheus, OpenTelemetry or CLI module.
func TestRootPackageDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/skiplock/skiplock").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := []string{"github.com/skiplock/skiplock", "github.com/jackc/", "golang.org/x/text/", "golang.org/x/sync/"}
	for _, pkg := range strings.Fields(string(out)) {
		ok := false
		for _, prefix := range allowed {
			ok = ok || strings.HasPrefix(pkg, prefix)
		}
		if !ok {
			t.Errorf("the root package depends on %s", pkg)
		}
	}
}
