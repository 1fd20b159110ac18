package skiplock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The host clock only paces processes; job and event state takes its time from the
// injected Clock or the database. So outside internal/hostclock, no non-test code of
// the library may read the host clock directly (commands, tools and the benchmark
// rig may: they are programs and stopwatches, not the library).
func TestHostClockRule(t *testing.T) {
	t.Parallel()
	allowed := func(path string) bool {
		return strings.HasPrefix(path, "internal/hostclock/") || strings.HasPrefix(path, "cmd/") ||
			strings.HasPrefix(path, "tools/") || strings.HasSuffix(path, "_test.go")
	}
	fset := token.NewFileSet()
	var offences []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || allowed(filepath.ToSlash(path)) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		timeName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"time"` {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		if timeName == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") {
				offences = append(offences, fset.Position(sel.Pos()).String()+": time."+sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offences {
		t.Errorf("%s: read the host clock through internal/hostclock (pacing only), or take time from the injected Clock", o)
	}
}
