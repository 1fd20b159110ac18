package chaos

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestConnectionError pins which failures of a harness statement on the Citus
// coordinator are tried again on a fresh session: the CI failure it was written
// for was a citus_rebalance_start whose cached connection to a restarted worker
// node had died (08006).
func TestConnectionError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "08006", Message: "cannot get the size because of a connection error"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "08001"}), true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("counting worker nodes: %w", &pgconn.ConnectError{}), true},
		{&pgconn.PgError{Code: "42P01"}, false},
		{&pgconn.PgError{Code: "55000", Message: "a rebalance is already running"}, false},
		{errors.New("something else"), false},
	} {
		if got := connectionError(c.err); got != c.want {
			t.Errorf("connectionError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
