package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The command line is checked before anything starts (no cluster, no children).
func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "worker-sigkill"},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{[]string{"--duration", "soon"}, 2, `invalid value "soon" for flag -duration`},
		{[]string{"--scenarios", "worker-sigkill,no-such"}, 2, `unknown scenario "no-such"; valid: `},
		{[]string{"--scenario", "no-such"}, 2, `unknown scenario "no-such"; valid: `},
		{[]string{"--help"}, 0, "rate-limit"},
		{[]string{"--help"}, 0, "mvcc-pin"},
		{[]string{"--help"}, 0, "citus-rebalance"},
		{[]string{"--pin", "long"}, 2, `invalid value "long" for flag -pin`},
		{[]string{"extra"}, 2, `unexpected arguments ["extra"]`},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("chaos %v: exit %d, want %d and %q in:\n%s", tc.args, code, tc.code, tc.want, errb.String())
		}
	}
}
