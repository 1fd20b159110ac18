package skiplock_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The rooms table of docs/architecture.md is the import rule of the module: each
// package belongs to exactly one room, and its non-test code imports only its own
// room's packages and those the room's "may import" column names in backticks. The
// table's format is described in the doc, above the table.
func TestArchitectureRooms(t *testing.T) {
	t.Parallel()
	rooms, err := readRooms("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	module, imports := modulePackages(t)
	pkgs := slices.Sorted(func(yield func(string) bool) {
		for p := range imports {
			if !yield(p) {
				return
			}
		}
	})

	for _, r := range rooms {
		for _, pat := range r.packages {
			if !slices.ContainsFunc(pkgs, pat.matches) && !pat.dirExists() {
				t.Errorf("docs/architecture.md, room %s: %s names neither a package of this module nor a directory", r.name, pat)
			}
		}
		for _, pat := range r.mayImport {
			if !slices.ContainsFunc(pkgs, pat.matches) {
				t.Errorf("docs/architecture.md, room %s may import %s, which names no package of this module", r.name, pat)
			}
		}
	}

	roomOf := map[string]room{}
	for _, p := range pkgs {
		var in []string
		for _, r := range rooms {
			if r.holds(p) {
				in = append(in, r.name)
				roomOf[p] = r
			}
		}
		switch {
		case len(in) == 0:
			t.Errorf("package %s is in no room of docs/architecture.md: add it to a row's room column", p)
		case len(in) > 1:
			t.Errorf("package %s is in %d rooms of docs/architecture.md (%s): keep it in one", p, len(in), strings.Join(in, "; "))
		}
	}

	for _, p := range pkgs {
		r, ok := roomOf[p]
		if !ok {
			continue
		}
		for _, imp := range imports[p] {
			dep, ok := relativePackage(module, imp)
			if !ok || r.holds(dep) || slices.ContainsFunc(r.mayImport, func(pat pattern) bool { return pat.matches(dep) }) {
				continue
			}
			t.Errorf("%s (room %s) imports %s, which the room's row in docs/architecture.md does not allow", p, r.name, dep)
		}
	}
}

func TestArchitecturePatterns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern string
		matches []string
		misses  []string
	}{
		{"skiplock", []string{"skiplock"}, []string{"outbox", "internal/store"}},
		{"internal/store", []string{"internal/store"}, []string{"internal/storefront", "internal"}},
		{"outbox/{amqppub,natspub}", []string{"outbox/amqppub", "outbox/natspub"}, []string{"outbox", "outbox/kafkapub"}},
		{"tools/internal/{chaos,faultproxy}", []string{"tools/internal/chaos", "tools/internal/faultproxy"}, []string{"tools/chaos"}},
		{"metrics/...", []string{"metrics", "metrics/otelmetrics"}, []string{"metricsx", "health"}},
		{"internal/*", []string{"internal/store", "internal/ident"}, []string{"internal/a/b", "outbox"}},
		{"...", []string{"skiplock", "cmd/skiplock/internal/bench"}, nil},
	}
	for _, c := range cases {
		pat := pattern(c.pattern)
		for _, p := range c.matches {
			if !pat.matches(p) {
				t.Errorf("%s does not match %s", c.pattern, p)
			}
		}
		for _, p := range c.misses {
			if pat.matches(p) {
				t.Errorf("%s matches %s", c.pattern, p)
			}
		}
	}

	rooms, err := parseRooms(strings.NewReader(`intro with a | pipe
| room | extra | may import | notes |
|---|---|---|---|
| root ` + "`skiplock`" + ` | x | pgx, ` + "`internal/store`, `internal/{a,b}`" + ` | n |
| ` + "`internal/store`" + ` | y | — |
after the table
| room | not | this one |
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rooms) != 2 || !rooms[0].holds("skiplock") || !rooms[1].holds("internal/store") ||
		len(rooms[0].mayImport) != 2 || !rooms[0].mayImport[1].matches("internal/b") || len(rooms[1].mayImport) != 0 {
		t.Fatalf("parsed %+v", rooms)
	}
	if _, err := parseRooms(strings.NewReader("| room | owns |\n|---|---|\n| `x` | y |\n")); err == nil {
		t.Fatal("a table without a may-import column was accepted")
	}
}

// A room of the table: its name (the room cell as written), its packages and what it
// may import, both as patterns relative to the module root.
type room struct {
	name      string
	packages  []pattern
	mayImport []pattern
}

func (r room) holds(pkg string) bool {
	return slices.ContainsFunc(r.packages, func(p pattern) bool { return p.matches(pkg) })
}

// A pattern names packages by their path from the module root: "skiplock" is the root
// package, "{a,b}" expands to both, a trailing "/..." takes the packages below, "*"
// matches within one path element, and "..." alone matches every package.
type pattern string

func (p pattern) matches(pkg string) bool {
	for _, alt := range expandBraces(string(p)) {
		switch {
		case alt == "...":
			return true
		case strings.HasSuffix(alt, "/..."):
			base := strings.TrimSuffix(alt, "/...")
			if pkg == base || strings.HasPrefix(pkg, base+"/") {
				return true
			}
		default:
			if ok, _ := path.Match(alt, pkg); ok {
				return true
			}
		}
	}
	return false
}

// dirExists reports whether every expansion of the pattern is a directory: a room of
// the table that holds another module or no Go code.
func (p pattern) dirExists() bool {
	for _, alt := range expandBraces(string(p)) {
		fi, err := os.Stat(filepath.FromSlash(strings.TrimSuffix(alt, "/...")))
		if err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

func expandBraces(s string) []string {
	open := strings.Index(s, "{")
	end := strings.Index(s, "}")
	if open < 0 || end < open {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[open+1:end], ",") {
		out = append(out, expandBraces(s[:open]+strings.TrimSpace(alt)+s[end+1:])...)
	}
	return out
}

func readRooms(file string) ([]room, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rooms, err := parseRooms(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return rooms, nil
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseRooms reads the first Markdown table whose header has a "room" and a
// "may import" column; other columns, and text around the table, are ignored.
func parseRooms(r io.Reader) ([]room, error) {
	sc := bufio.NewScanner(r)
	roomCol, importCol := -1, -1
	var rooms []room
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if roomCol >= 0 {
				break // the table ended
			}
			continue
		}
		cells := tableCells(line)
		if roomCol < 0 {
			r, i := slices.Index(cells, "room"), slices.Index(cells, "may import")
			if r >= 0 && i >= 0 {
				roomCol, importCol = r, i
			}
			continue
		}
		if strings.Trim(line, "|-: ") == "" {
			continue // the separator row
		}
		if len(cells) <= max(roomCol, importCol) {
			return nil, fmt.Errorf("rooms table: row %q has %d cells, want at least %d", line, len(cells), max(roomCol, importCol)+1)
		}
		rm := room{name: cells[roomCol], packages: patterns(cells[roomCol]), mayImport: patterns(cells[importCol])}
		if len(rm.packages) == 0 {
			return nil, fmt.Errorf("rooms table: row %q names no package in backticks", line)
		}
		rooms = append(rooms, rm)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rooms) == 0 {
		return nil, fmt.Errorf("no rooms table (a header with a %q and a %q column, then rows)", "room", "may import")
	}
	return rooms, nil
}

func tableCells(line string) []string {
	line = strings.ReplaceAll(strings.Trim(line, "|"), `\|`, "\x00")
	cells := strings.Split(line, "|")
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|")
	}
	return cells
}

func patterns(cell string) []pattern {
	var out []pattern
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		out = append(out, pattern(strings.TrimSpace(m[1])))
	}
	return out
}

// modulePackages lists the module's packages (relative to the module root, the root
// package as "skiplock") with their non-test imports.
func modulePackages(t *testing.T) (module string, imports map[string][]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-f", "{{.Module.Path}} {{.ImportPath}} {{join .Imports \" \"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports = map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("go list printed %q", line)
		}
		module = f[0]
		p, ok := relativePackage(module, f[1])
		if !ok {
			t.Fatalf("go list printed %s outside module %s", f[1], module)
		}
		imports[p] = f[2:]
	}
	return module, imports
}

func relativePackage(module, importPath string) (string, bool) {
	if importPath == module {
		return "skiplock", true
	}
	rel, ok := strings.CutPrefix(importPath, module+"/")
	return rel, ok
}
