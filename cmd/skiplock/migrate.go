package main

import (
	"fmt"
	"io"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrate"
	"github.com/spf13/cobra"
)

func newMigrateCmd(db *dbFlags) *cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "apply the pending migrations (under an advisory lock, one transaction each)",
		Args:  noArgs,
	}
	upOut := newOutputFlag(up)
	upCitus := up.Flags().Bool("citus", false, "then lay the schema out for a Citus cluster: jobs and the outbox distributed by\n"+
		"concurrency_key, small tables as reference tables (run on the coordinator; docs/citus.md)")
	up.RunE = func(cmd *cobra.Command, _ []string) error {
		pool, err := db.pool(cmd, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		schema := db.schemaName()
		var wasDistributed bool
		if *upCitus {
			if wasDistributed, err = skiplock.Distributed(cmd.Context(), pool, schema); err != nil {
				return err
			}
		}
		applied, err := skiplock.MigrateWith(cmd.Context(), pool, schema, skiplock.MigrateOpts{Citus: *upCitus})
		if err != nil {
			return err
		}
		if upOut.json() {
			if applied == nil {
				applied = []int{}
			}
			out := map[string]any{"schema": schema, "applied": applied}
			if *upCitus {
				out["citus_layout"] = map[bool]string{false: "applied", true: "present"}[wasDistributed]
			}
			return printJSON(cmd.OutOrStdout(), out)
		}
		w := cmd.OutOrStdout()
		if len(applied) == 0 && (!*upCitus || wasDistributed) {
			fmt.Fprintf(w, "schema %s is up to date\n", schema)
		}
		for _, v := range applied {
			fmt.Fprintf(w, "applied %04d to schema %s\n", v, schema)
		}
		if *upCitus && !wasDistributed {
			fmt.Fprintf(w, "applied the Citus layout to schema %s (distributed by concurrency_key)\n", schema)
		}
		return nil
	}

	status := &cobra.Command{
		Use:   "status",
		Short: "list the migrations and whether each is applied",
		Args:  noArgs,
	}
	statusOut := newOutputFlag(status)
	status.RunE = func(cmd *cobra.Command, _ []string) error {
		pool, err := db.pool(cmd, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		list, err := migrate.List(cmd.Context(), pool, db.schemaName())
		if err != nil {
			return err
		}
		type row struct {
			Version int    `json:"version"`
			Name    string `json:"name"`
			Applied bool   `json:"applied"`
		}
		rows := []row{}
		for _, s := range list {
			rows = append(rows, row{s.Version, s.Name, s.Applied})
		}
		if statusOut.json() {
			return printJSON(cmd.OutOrStdout(), rows)
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "MIGRATION\tSTATE")
		for _, r := range rows {
			state := "pending"
			if r.Applied {
				state = "applied"
			}
			fmt.Fprintf(tw, "%04d_%s\t%s\n", r.Version, r.Name, state)
		}
		return tw.Flush()
	}

	sql := &cobra.Command{
		Use:   "sql",
		Short: "print the migrations' SQL for the schema (no database needed)",
		Args:  noArgs,
	}
	sqlCitus := sql.Flags().Bool("citus", false, "append the Citus layout of `migrate up --citus`, in a transaction of its own")
	sql.RunE = func(cmd *cobra.Command, _ []string) error {
		ddl, err := skiplock.MigrationSQL(db.schemaName())
		if err != nil {
			return err
		}
		if *sqlCitus {
			layout, err := skiplock.CitusLayoutSQL(db.schemaName())
			if err != nil {
				return err
			}
			ddl += "\n-- the Citus layout (skiplock migrate up --citus; docs/citus.md)\nBEGIN;\n" + layout + "COMMIT;\n"
		}
		_, err = io.WriteString(cmd.OutOrStdout(), ddl)
		return err
	}
	return group("migrate", "apply (up), report (status) or print (sql) the schema migrations", up, status, sql)
}
