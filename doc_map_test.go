package skiplock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// doc.go's "The Client's methods" section lists every exported method of Client
// exactly once, and nothing else: a method added, renamed or removed without the map
// fails here.
func TestDocMapListsEveryClientMethod(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]bool{}
	var section string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if name == "doc.go" && f.Doc != nil {
			section = docSection(f.Doc.Text(), "The Client's methods")
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.IsExported() && receiverIs(fn, "Client") {
				methods[fn.Name.Name] = true
			}
		}
	}
	if len(methods) == 0 {
		t.Fatal("found no exported method of Client")
	}
	if section == "" {
		t.Fatal(`doc.go has no "# The Client's methods" section`)
	}
	for _, problem := range checkDocMap(section, methods) {
		t.Error(problem)
	}
}

func TestDocMapCheckReportsEachDrift(t *testing.T) {
	t.Parallel()
	methods := map[string]bool{"Start": true, "Stop": true, "Enqueue": true}
	got := checkDocMap("  - Work: [Client.Start], [Client.Start], [Client.Gone].\n  - Other: [Job.Attempt]", methods)
	want := []string{
		"doc.go lists Client.Start 2 times, want once",
		"doc.go lists Client.Gone, which is not an exported method of Client",
		"doc.go's map of Client's methods lacks Client.Enqueue",
		"doc.go's map of Client's methods lacks Client.Stop",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := checkDocMap("[Client.Enqueue] [Client.Start] [Client.Stop]", methods); len(got) != 0 {
		t.Fatalf("a complete map reported %v", got)
	}
}

var clientLink = regexp.MustCompile(`\[Client\.([A-Za-z0-9_]+)\]`)

// checkDocMap compares the [Client.Method] links of section with methods.
func checkDocMap(section string, methods map[string]bool) []string {
	var problems []string
	listed := map[string]int{}
	var order []string
	for _, m := range clientLink.FindAllStringSubmatch(section, -1) {
		if listed[m[1]] == 0 {
			order = append(order, m[1])
		}
		listed[m[1]]++
	}
	for _, name := range order {
		switch {
		case !methods[name]:
			problems = append(problems, "doc.go lists Client."+name+", which is not an exported method of Client")
		case listed[name] > 1:
			problems = append(problems, "doc.go lists Client."+name+" "+strconv.Itoa(listed[name])+" times, want once")
		}
	}
	var missing []string
	for name := range methods {
		if listed[name] == 0 {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	for _, name := range missing {
		problems = append(problems, "doc.go's map of Client's methods lacks Client."+name)
	}
	return problems
}

// docSection returns the text under the heading "# title" of a package comment, up to
// the next heading.
func docSection(text, title string) string {
	_, after, ok := strings.Cut(text, "\n# "+title+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(after, "\n# "); i >= 0 {
		after = after[:i]
	}
	return after
}

func receiverIs(fn *ast.FuncDecl, typeName string) bool {
	if fn.Recv == nil || len(fn.Recv.List) != 1 {
		return false
	}
	expr := fn.Recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	id, ok := expr.(*ast.Ident)
	return ok && id.Name == typeName
}
