package main

import (
	"fmt"

	"github.com/skiplock/skiplock"
	"github.com/spf13/cobra"
)

func newRolesCmd(db *dbFlags) *cobra.Command {
	var n skiplock.RoleNames
	sql := &cobra.Command{
		Use:   "sql [--migrator r] [--producer r] [--worker r] [--relay r] [--dashboard r]",
		Short: "print the GRANTs of the least-privilege roles for the schema (no database needed)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ddl, err := skiplock.RolesSQL(db.schemaName(), n)
			if err != nil {
				return invalidAsUsage(cmd, err) // ErrInvalid: a role flag's name
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), ddl)
			return err
		},
	}
	fs := sql.Flags()
	fs.StringVar(&n.Migrator, "migrator", "skiplock_migrator", "role owning the tables (empty: leave out)")
	fs.StringVar(&n.Producer, "producer", "skiplock_producer", "role of the application that enqueues")
	fs.StringVar(&n.Worker, "worker", "skiplock_worker", "role of the worker processes")
	fs.StringVar(&n.Relay, "relay", "skiplock_relay", "role of the outbox relay")
	fs.StringVar(&n.Dashboard, "dashboard", "skiplock_dashboard", "read-only role (dashboards, metrics)")
	return group("roles", "print the GRANTs of the least-privilege roles (skiplock roles sql)", sql)
}
