package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// statementFields returns every stmt field of s, at any depth, by its Go path. It is
// how the tests find the statements: nobody has to list a new one.
func statementFields(s *Store) map[string]stmt {
	out := map[string]stmt{}
	stmtType := reflect.TypeFor[stmt]()
	var walk func(path string, v reflect.Value)
	// field records f, a statement or an array of them (the insert variants), at name.
	var field func(name string, f reflect.Value)
	field = func(name string, f reflect.Value) {
		switch {
		case f.Type() == stmtType:
			// Unexported fields cannot be Interface()d, but their strings can be read.
			// The store pointer is read as an address: s when the builder wired it.
			var store *Store
			if f.FieldByName("store").Pointer() == reflect.ValueOf(s).Pointer() {
				store = s
			}
			out[name] = stmt{
				name:       f.FieldByName("name").String(),
				sql:        f.FieldByName("sql").String(),
				layout:     Layout(f.FieldByName("layout").String()),
				guard:      f.FieldByName("guard").String(),
				citusGuard: f.FieldByName("citusGuard").String(),
				store:      store,
			}
		case f.Kind() == reflect.Array:
			for j := range f.Len() {
				field(fmt.Sprintf("%s[%d]", name, j), f.Index(j))
			}
		case f.Kind() == reflect.Struct:
			walk(name+".", f)
		}
	}
	walk = func(path string, v reflect.Value) {
		for i := range v.NumField() {
			field(path+v.Type().Field(i).Name, v.Field(i))
		}
	}
	walk("", reflect.ValueOf(s).Elem())
	return out
}

// TestStatementsRegistered: every statement field was made by builder.add (so SQL
// finds it by name and the prepare test below checks it), has a unique name, and is
// complete.
func TestStatementsRegistered(t *testing.T) {
	t.Parallel()
	s, err := New("registry_check")
	if err != nil {
		t.Fatal(err)
	}
	fields := statementFields(s)
	if len(fields) == 0 {
		t.Fatal("found no statement fields")
	}
	recorded := map[string]stmt{}
	for _, st := range s.all {
		if _, dup := recorded[st.name]; dup {
			t.Errorf("two statements are named %q", st.name)
		}
		recorded[st.name] = st
	}
	seen := map[string]string{}
	for path, st := range fields {
		switch {
		case st.name == "" || st.sql == "":
			t.Errorf("%s: not built (name %q, %d bytes of SQL); make it with builder.add in its group's constructor", path, st.name, len(st.sql))
			continue
		case strings.Contains(st.sql, "{{s}}"):
			t.Errorf("%s: the schema placeholder was not replaced", path)
		case !strings.Contains(st.sql, `"registry_check"`) && !schemaFree[st.name]:
			t.Errorf("%s: does not name the store's schema; add it to schemaFree if that is intended", path)
		}
		if other, dup := seen[st.name]; dup {
			t.Errorf("%s and %s share the name %q", path, other, st.name)
		}
		seen[st.name] = path
		if rec, ok := recorded[st.name]; !ok || rec != st {
			t.Errorf("%s (%q) was not recorded by builder.add as it is", path, st.name)
		}
		if st.store != s {
			t.Errorf("%s (%q) does not read its own Store's layout flag", path, st.name)
		}
		// The Citus guard differs from the single-node one in its plan mode only, and
		// exactly when that one forces a generic plan (citusGuardOf).
		if generic := strings.Contains(st.guard, "force_generic_plan"); generic != (st.citusGuard != "") {
			t.Errorf("%s (%q): guard forces a generic plan %v, has a Citus guard %v", path, st.name, generic, st.citusGuard != "")
		} else if generic && strings.Replace(st.citusGuard, "force_custom_plan", "force_generic_plan", 1) != st.guard {
			t.Errorf("%s (%q): its Citus guard is not its guard with a custom plan", path, st.name)
		}
		if got := s.SQL(st.name); got != st.sql {
			t.Errorf("SQL(%q) returns other text than %s", st.name, path)
		}
	}
	if len(recorded) != len(fields) {
		t.Errorf("builder.add recorded %d statements, the Store has %d statement fields", len(recorded), len(fields))
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("SQL of an unknown name did not panic")
			}
		}()
		s.SQL("no_such_statement")
	}()
}

// schemaFree are the statements that read only catalogs or functions (the schema
// reaches them as a parameter, if at all).
var schemaFree = map[string]bool{
	"jobs_relkind": true, "db_clock": true, "partition_list": true, "partition_exists": true,
	"partition_reloptions": true, "table_acl": true, "column_acl": true, "stats_pages": true,
	"send_notify": true, "notify_async": true, "service_lock": true, "stats_horizon": true,
	"job_state_estimates": true, "stats_writable": true, "citus_present": true, "lanes_changed": true,
}

// TestPrepareEveryStatement prepares and plans every statement of the store against
// a migrated schema, in the plain and in the partitioned layout, so a typo or a
// statement that no longer matches the schema fails here rather than in production.
// Preparing runs parse analysis (syntax, names, types); EXPLAIN EXECUTE under
// plan_cache_mode = force_generic_plan then builds the generic plan, which catches
// what only the planner checks (such as an ON CONFLICT target that has no matching
// unique index on a partitioned table). Nothing is executed.
func TestPrepareEveryStatement(t *testing.T) {
	t.Parallel()
	for _, layout := range []Layout{LayoutPlain, LayoutPartitioned} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newStore(t, pgtest.Schema(t))
			if layout == LayoutPartitioned {
				partition(t, s)
			}
			if got, err := s.JobsLayout(ctx, pgtest.Pool(t)); err != nil || got != layout {
				t.Fatalf("layout %q, %v; want %q", got, err, layout)
			}
			conn, err := pgx.Connect(ctx, pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
				t.Fatal(err)
			}
			checked := 0
			for path, st := range statementFields(s) {
				if st.layout != LayoutMissing && st.layout != layout {
					continue
				}
				if strings.TrimSpace(st.sql) == "" {
					t.Errorf("%s: no SQL", path)
					continue
				}
				if err := prepareAndPlan(ctx, conn, fmt.Sprintf("check_%d", checked), st.sql); err != nil {
					t.Errorf("%s (%q) in the %s layout: %v\n%s", path, st.name, layout, err, st.sql)
				}
				checked++
			}
			t.Logf("%d statements prepared and planned", checked)
			if err := Listen(ctx, conn, "skiplock.check"); err != nil {
				t.Errorf("Listen: %v", err)
			}
			if layout == LayoutPartitioned {
				checkPartitionDDL(t, s)
			}
		})
	}
}

func prepareAndPlan(ctx context.Context, conn *pgx.Conn, name, sql string) error {
	desc, err := conn.PgConn().Prepare(ctx, name, sql, nil)
	if err != nil {
		return fmt.Errorf("PREPARE: %w", err)
	}
	defer conn.Exec(ctx, "DEALLOCATE "+name)
	args := strings.TrimSuffix(strings.Repeat("NULL, ", len(desc.ParamOIDs)), ", ")
	if args != "" {
		args = "(" + args + ")"
	}
	if _, err := conn.Exec(ctx, "EXPLAIN EXECUTE "+name+args); err != nil {
		return fmt.Errorf("planning: %w", err)
	}
	return nil
}

// checkPartitionDDL runs the partition DDL (which cannot be prepared) in a
// transaction it rolls back.
func checkPartitionDDL(t *testing.T, s *Store) {
	ctx := context.Background()
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	day := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	from, to := UUIDv7Floor(day), UUIDv7Floor(day.AddDate(0, 0, 1))
	if created, err := s.CreatePartition(ctx, tx, "jobs_p20990101", from, to, LegacyPartition); err != nil || !created {
		t.Fatalf("CreatePartition: %v %v", created, err)
	}
	if err := s.LockJobs(ctx, tx, time.Second); err != nil {
		t.Fatalf("LockJobs: %v", err)
	}
	if err := s.DropPartition(ctx, tx, "jobs_p20990101", from, to); err != nil {
		t.Fatalf("DropPartition: %v", err)
	}
}
