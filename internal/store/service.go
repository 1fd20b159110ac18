package store

// Maintenance services (reclaimer, retention, partition manager, …) each run in one
// client at a time: every run is a transaction that first tries a transaction-level
// advisory lock named after the service and the schema.

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type serviceStatements struct {
	tryLock stmt
}

func newServiceStatements(b *builder) serviceStatements {
	return serviceStatements{
		tryLock: b.add("service_lock", "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))"),
	}
}

// TryServiceLock tries to take the advisory lock of maintenance service name for the
// rest of tx, without waiting, and reports whether it got it (false: another client
// is running that service now). The key, "skiplock.<name>.<schema>", keeps services of
// different schemas in one database apart.
func (s *Store) TryServiceLock(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, s.service.tryLock.sql, "skiplock."+name+"."+s.Schema).Scan(&ok)
	return ok, err
}
