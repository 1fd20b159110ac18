package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/skiplock/skiplock"
)

func init() {
	register("roles", "print the GRANTs of the least-privilege roles (skiplock roles sql)", runRoles)
}

func runRoles(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("roles", flag.ContinueOnError)
	fs.SetOutput(errW(ctx))
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: skiplock roles sql [--schema s] [--migrator r] [--producer r] [--worker r] [--relay r] [--dashboard r]")
		fs.PrintDefaults()
	}
	var db dbFlags
	var n skiplock.RoleNames
	db.register(fs)
	fs.StringVar(&n.Migrator, "migrator", "skiplock_migrator", "role owning the tables (empty: leave out)")
	fs.StringVar(&n.Producer, "producer", "skiplock_producer", "role of the application that enqueues")
	fs.StringVar(&n.Worker, "worker", "skiplock_worker", "role of the worker processes")
	fs.StringVar(&n.Relay, "relay", "skiplock_relay", "role of the outbox relay")
	fs.StringVar(&n.Dashboard, "dashboard", "skiplock_dashboard", "read-only role (dashboards, metrics)")
	if len(args) == 0 || args[0] != "sql" {
		fs.Usage()
		return errors.New("roles: the subcommand is sql")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ddl, err := skiplock.RolesSQL(db.schema, n)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(outW(ctx), ddl)
	return err
}
