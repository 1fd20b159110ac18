package skiplock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/skiplock/skiplock/internal/validate"
)

// DB is where Enqueue writes: pgx.Tx, *pgx.Conn and *pgxpool.Pool satisfy it, and
// FromSQL adapts database/sql. Pass the transaction that makes the business change,
// and the job exists if and only if that transaction commits.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQLDB is satisfied by database/sql's *sql.Tx, *sql.DB and *sql.Conn.
type SQLDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// FromSQL adapts a database/sql handle opened with pgx's stdlib driver
// (github.com/jackc/pgx/v5/stdlib, driver name "pgx") so it can be passed to EnqueueTx
// and Outbox.Write. With a *sql.Tx the job commits or rolls back with that transaction.
func FromSQL(db SQLDB) DB { return sqlDB{db} }

type sqlDB struct{ db SQLDB }

// errNilSQL is what a FromSQL adapter around a nil handle answers, instead of the
// panic database/sql would raise.
func (s sqlDB) errNilSQL() error {
	if validate.IsNil(s.db) {
		return invalid("db", "FromSQL was given a nil database/sql handle")
	}
	return nil
}

func (s sqlDB) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	if err := s.errNilSQL(); err != nil {
		return pgconn.CommandTag{}, err
	}
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return pgconn.NewCommandTag(fmt.Sprintf("UPDATE %d", n)), nil
}

func (s sqlDB) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	if err := s.errNilSQL(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return &sqlRows{rows: rows}, nil
}

func (s sqlDB) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	rows, err := s.Query(ctx, query, args...)
	return sqlRow{rows: rows, err: err}
}

type sqlRow struct {
	rows pgx.Rows
	err  error
}

func (r sqlRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// sqlRows implements the part of pgx.Rows the store uses on top of *sql.Rows.
type sqlRows struct {
	rows  *sql.Rows
	err   error
	types *pgtype.Map // for Scan's arrays, made on first need
}

func (r *sqlRows) Close()                                       { r.rows.Close() }
func (r *sqlRows) Err() error                                   { return errors.Join(r.err, r.rows.Err()) }
func (r *sqlRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *sqlRows) Next() bool                                   { return r.rows.Next() }
func (r *sqlRows) RawValues() [][]byte                          { return nil }
func (r *sqlRows) Conn() *pgx.Conn                              { return nil }
func (r *sqlRows) TypeMap() *pgtype.Map                         { return nil }

// Scan fills dest as pgx would. database/sql cannot scan an array column into a
// slice (a job's tags: skiplocktest reads jobs through the caller's DB), so such a
// destination is scanned through pgx's types; database/sql of Go 1.27 leaves it to
// the driver.
func (r *sqlRows) Scan(dest ...any) error {
	var wrapped []any // dest with its slices wrapped; the caller's dest is left as it is
	for i, d := range dest {
		if _, ok := d.(*[]string); !ok {
			continue
		}
		if wrapped == nil {
			wrapped = slices.Clone(dest)
		}
		if r.types == nil {
			r.types = pgtype.NewMap()
		}
		wrapped[i] = r.types.SQLScanner(d)
	}
	if wrapped != nil {
		return r.rows.Scan(wrapped...)
	}
	return r.rows.Scan(dest...)
}

func (r *sqlRows) Values() ([]any, error) {
	cols, err := r.rows.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return vals, r.rows.Scan(ptrs...)
}
