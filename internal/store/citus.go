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
