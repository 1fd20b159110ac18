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
	up.RunE = func(cmd *cobra.Command, _ []string) error {
		pool, err := db.pool(cmd, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		schema := db.schemaName()
		applied, err := skiplock.Migrate(cmd.Context(), pool, schema)
		if err != nil {
			return err
		}
		if upOut.json() {
			if applied == nil {
				applied = []int{}
			}
			return printJSON(cmd.OutOrStdout(), map[string]any{"schema": schema, "applied": applied})
		}
		w := cmd.OutOrStdout()
		if len(applied) == 0 {
			fmt.Fprintf(w, "schema %s is up to date\n", schema)
		}
		for _, v := range applied {
			fmt.Fprintf(w, "applied %04d to schema %s\n", v, schema)
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			ddl, err := skiplock.MigrationSQL(db.schemaName())
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), ddl)
			return err
		},
	}
	return group("migrate", "apply (up), report (status) or print (sql) the schema migrations", up, status, sql)
}
