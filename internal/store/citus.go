package store

// The Citus layout (docs/citus.md, internal/migrate/citus.sql): which statements
// differ there, and how the store learns that a schema has it.
//
// A Store is built without touching the database (skiplock.NewClient and outbox.New
// do not), so it learns the layout the first time a statement that differs by layout
// is about to run — a skipped insert's holder lookup, an outbox write that names a
// concurrency key — and keeps the answer for its lifetime. The single-node layout pays
// one catalog query per Store, and only on those paths; its statements are unchanged.
// Laying a schema out for Citus is a maintenance-window step (docs/citus.md): create
// the clients again after it.

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
)

// LayoutCitus marks a statement valid only on the Citus layout (jobs distributed by
// concurrency_key, outbox.concurrency_key present). JobsLayout never returns it: a
// distributed jobs table is a plain table on the coordinator.
const LayoutCitus Layout = "citus"

// planCitusCustom is the plan mode of the statements of the Citus layout that name
// one key but are not one-table statements: Citus plans them as router queries only
// with their values (a custom plan); under a generic plan it cannot plan them at all.
// Each run plans once on the coordinator and once on the node of the key.
const planCitusCustom = planCustom

// citusGuardOf is the plan guard a statement guarded by guard runs under on the Citus
// layout: the same settings, but a custom plan where guard forces a generic one, or ""
// when guard forces none (its statements run under guard there too).
//
// Citus cannot make a generic plan of a statement that reads several shards with
// parameters ("could not create distributed plan"), and forcing one is what the
// single-node guard does (planguard.go). With the values, Citus plans the same
// statement as a read or a write of every shard (docs/citus_plans.md): the lookups by
// id, the operator's actions, the stats and the lineage lookups, which name no key.
// Each run is planned on the coordinator, as the Citus layout's own statements are
// (planCitusCustom); the other settings shape what the coordinator plans itself
// (its subplans and the merge of the shards' rows), as they do on one node.
func citusGuardOf(guard string) string {
	const generic, custom = `set_config('plan_cache_mode', 'force_generic_plan', true)`, `set_config('plan_cache_mode', 'force_custom_plan', true)`
	if !strings.Contains(guard, generic) {
		return ""
	}
	return strings.Replace(guard, generic, custom, 1)
}

type citusStatements struct {
	present, distributed stmt
}

func newCitusStatements(b *builder) citusStatements {
	return citusStatements{
		// Citus' catalog exists: then the second statement may name it.
		present: b.add("citus_present", `SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL`),
		distributed: b.addFor(LayoutCitus, "jobs_distributed",
			`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = to_regclass('{{s}}.jobs'))`),
	}
}

// addCitus records a statement of the Citus layout only, run under guard.
func (b *builder) addCitus(guard, name, text string) stmt {
	return b.record(stmt{name: name, sql: strings.ReplaceAll(text, "{{s}}", b.q), layout: LayoutCitus, guard: guard})
}

// layoutState caches Distributed's answer: 0 not known yet, 1 single node, 2 Citus.
type layoutState struct{ v atomic.Int32 }

// Distributed reports whether the schema has the Citus layout (its jobs table
// distributed by Citus), asking the database once per Store.
func (s *Store) Distributed(ctx context.Context, db DBTX) (bool, error) {
	switch s.layout.v.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	var citus, dist bool
	if err := db.QueryRow(ctx, s.citus.present.sql).Scan(&citus); err != nil {
		return false, fmt.Errorf("store: looking for Citus: %w", err)
	}
	if citus {
		if err := db.QueryRow(ctx, s.citus.distributed.sql).Scan(&dist); err != nil {
			return false, fmt.Errorf("store: checking whether %s is distributed: %w", s.Table("jobs"), err)
		}
	}
	v := int32(1)
	if dist {
		v = 2
	}
	s.layout.v.Store(v)
	return dist, nil
}
