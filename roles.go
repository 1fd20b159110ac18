package skiplock

import "github.com/skiplock/skiplock/internal/store"

// RoleNames name the roles of a least-privilege deployment (docs/roles.md):
//
//	Migrator   owns the tables: migrations, partitioning, partition maintenance
//	Producer   the application: enqueue jobs, write outbox events, inbox claims
//	Worker     claim, heartbeat and finish jobs; reclaim; row retention; stats
//	Relay      the outbox relay: claim, mark, prune and requeue events
//	Dashboard  read-only: stats, listings, metrics
//
// An empty name leaves that role out of RolesSQL's output.
type RoleNames struct {
	Migrator, Producer, Worker, Relay, Dashboard string
}

// RolesSQL returns the GRANT statements for schema's roles ("" means DefaultSchema).
// The roles must exist; run the output as the schema's owner.
func RolesSQL(schema string, names RoleNames) (string, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	st, err := store.New(schema)
	if err != nil {
		return "", invalid("schema", "%v", err)
	}
	sql, err := st.RolesSQL(store.RoleNames(names))
	if err != nil {
		return "", invalid("roles", "%v", err)
	}
	return sql, nil
}
