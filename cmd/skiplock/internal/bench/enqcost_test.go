package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// E1 accounts for every cost an enqueue pays in the table: each index of jobs and
// each trigger that fires on an insert is removed by one of its variants (or is the
// primary key, which the plain table keeps too). A new index or insert trigger on
// jobs fails this test until the breakdown names it.
func TestE1CoversEveryIndexAndInsertTrigger(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	ctx := context.Background()
	var ddl strings.Builder
	for _, v := range costVariants() {
		for _, d := range v.ddl {
			ddl.WriteString(d + "\n")
		}
	}
	rows, err := pool.Query(ctx, `
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass AND NOT i.indisprimary
UNION ALL
SELECT tgname FROM pg_trigger
WHERE tgrelid = $1::regclass AND NOT tgisinternal AND tgtype & 4 <> 0`, `"`+schema+`".jobs`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		n++
		if !strings.Contains(ddl.String(), " "+name+" ") && !strings.Contains(ddl.String(), "."+name+"\n") {
			t.Errorf("E1 has no variant without %s: add one (enqcost.go) and its row to docs/enqueue_cost.md", name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found only %d indexes and insert triggers on jobs", n)
	}
}

// E1 runs end to end at a tiny scale: every variant's schema takes its DDL and
// every variant enqueues.
func TestE1Runs(t *testing.T) {
	env := &Env{Pool: pgtest.Pool(t), URL: pgtest.URL(t), Settings: "test", Scale: 0.02}
	r, err := runE1(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range costVariants() {
		for _, c := range []string{"01c", "16c"} {
			line, _ := r.Extra[fmt.Sprintf("%s %02d %s", c, i, v.name)].(string)
			if line == "" || strings.HasPrefix(strings.TrimSpace(line), "0 ") {
				t.Errorf("%s %s: %q", c, v.name, line)
			}
		}
	}
}
