package pgerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRetryable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{errors.New("conn closed"), true},
		{&pgconn.PgError{Code: "22021"}, false}, // invalid byte sequence
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "42P01"}, false},
		{&pgconn.PgError{Code: "54000"}, false},
		{&pgconn.PgError{Code: "P0001"}, false},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "57P01"}, true}, // admin shutdown
		{&pgconn.PgError{Code: "53300"}, true}, // too many connections
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "22P05"}), false},
	}
	for _, c := range cases {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v [%s]) = %v, want %v", c.err, Code(c.err), got, c.want)
		}
	}
}

func TestWrap(t *testing.T) {
	t.Parallel()
	errMissing := errors.New("not migrated")
	bad := func(r string) error { return fmt.Errorf("bad input: %s", r) }
	if err := Wrap(&pgconn.PgError{Code: "22021", Message: "invalid byte"}, bad, errMissing); err == nil || err.Error() != "bad input: invalid byte" {
		t.Errorf("bad text: %v", err)
	}
	if err := Wrap(&pgconn.PgError{Code: "42P01"}, bad, errMissing); !errors.Is(err, errMissing) {
		t.Errorf("missing table: %v", err)
	}
	plain := errors.New("x")
	if err := Wrap(plain, bad, errMissing); err != plain {
		t.Errorf("other errors pass through: %v", err)
	}
}
