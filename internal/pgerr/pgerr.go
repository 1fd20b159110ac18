// Package pgerr classifies the errors skiplock's statements return, for the root
// package and the outbox alike: which ones retrying can fix (the database is
// unreachable, restarting, overloaded, or chose this transaction as a deadlock
// victim) and which ones it never can (the statement's data or the schema is wrong).
//
// The distinction matters for batched writes: a completion batch that fails because
// of one outcome's data must be split so the other outcomes are written, while a
// batch that fails because the database is down must be retried whole.
package pgerr

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable reports whether err may succeed if the same statement is sent again
// later. Errors that are not from the server (network, timeouts, a closed pool) are
// retryable; server errors are retryable only in the classes that describe the
// server's condition rather than the statement: 08 connection exception, 40
// transaction rollback (serialization failure, deadlock), 53 insufficient resources,
// 55 object not in prerequisite state (lock not available), 57 operator intervention
// (shutdown, cancel), 58 system error and XX internal error. Everything else — 22 data
// exception, 23 integrity constraint violation, 42 syntax error or access rule
// violation, 54 program limit exceeded, P0 raised by PL/pgSQL, … — would fail again.
func Retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err != nil
	}
	if len(pgErr.Code) < 2 {
		return true
	}
	switch pgErr.Code[:2] {
	case "08", "40", "53", "55", "57", "58", "XX":
		return true
	}
	return false
}

// Code returns err's SQLSTATE, or "" when err is not a server error.
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Wrap turns the server errors a caller can act on into the caller's typed errors:
// text the database refused (invalid text representation, untranslatable character,
// invalid byte sequence) becomes badInput(the server's message), and a missing
// schema, table, type or function becomes notMigrated wrapping the original.
// Other errors are returned as they are.
func Wrap(err error, badInput func(reason string) error, notMigrated error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "22P02", "22P05", "22021":
		return badInput(pgErr.Message)
	case "3F000", "42P01", "42704", "42883":
		return fmt.Errorf("%w: %v", notMigrated, err)
	}
	return err
}
