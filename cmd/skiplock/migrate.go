package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/migrate"
)

func init() {
	register("migrate", "apply (up), report (status) or print (sql) the schema migrations", runMigrate)
}

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: skiplock migrate up|status|sql [flags]")
		fs.PrintDefaults()
	}
	var db dbFlags
	db.register(fs)
	if len(args) == 0 {
		fs.Usage()
		return fmt.Errorf("migrate: missing subcommand (up, status or sql)")
	}
	sub := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch sub {
	case "sql":
		ddl, err := skiplock.MigrationSQL(db.schema)
		if err != nil {
			return err
		}
		_, err = os.Stdout.WriteString(ddl)
		return err
	case "up", "status":
	default:
		return fmt.Errorf("migrate: unknown subcommand %q (up, status or sql)", sub)
	}
	pool, err := db.pool(ctx, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if sub == "up" {
		applied, err := skiplock.Migrate(ctx, pool, db.schema)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Printf("schema %s is up to date\n", db.schema)
		}
		for _, v := range applied {
			fmt.Printf("applied %04d to schema %s\n", v, db.schema)
		}
		return nil
	}
	status, err := migrate.List(ctx, pool, db.schema)
	if err != nil {
		return err
	}
	for _, s := range status {
		state := "pending"
		if s.Applied {
			state = "applied"
		}
		fmt.Printf("%04d_%-24s %s\n", s.Version, s.Name, state)
	}
	return nil
}
