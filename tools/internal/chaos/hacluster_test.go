package chaos

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestFreePortsBelowEphemeralRange: a cluster's ports are taken below the kernel's
// ephemeral range, where an outgoing connection cannot take one before a node that
// starts later (citus-rebalance's added worker) binds it.
func TestFreePortsBelowEphemeralRange(t *testing.T) {
	t.Parallel()
	lo, hi := portWindow(4)
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral range to compare with: %v", err)
	}
	eph, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	if hi+3 >= eph || lo < 1024 || lo >= hi {
		t.Fatalf("portWindow(4) = %d..%d, ephemeral range from %d", lo, hi, eph)
	}
	for range 20 {
		p, err := freePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p+3 >= eph {
			t.Fatalf("freePorts(4) = %d: ports %d..%d reach the ephemeral range from %d", p, p, p+3, eph)
		}
	}
}
