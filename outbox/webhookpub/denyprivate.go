package webhookpub

// Config.DenyPrivateNetworks: the dialer hook that refuses non-public addresses,
// checked on the resolved address at dial time (SSRF and DNS rebinding guard).

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrPrivateAddress is wrapped by the error for a request refused because its
// destination resolved to a non-public address while Config.DenyPrivateNetworks is
// set.
var ErrPrivateAddress = errors.New("webhookpub: destination address is not public")

// denyPrivate is a net.Dialer Control hook: it runs after name resolution, on the
// address about to be connected, and refuses non-public ones.
func denyPrivate(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dialled address %q", ErrPrivateAddress, address)
	}
	if !isPublic(ap.Addr()) {
		return fmt.Errorf("%w: %s (Config.DenyPrivateNetworks is set)", ErrPrivateAddress, ap.Addr())
	}
	return nil
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2002::/16"),       // 6to4: can embed any IPv4 address
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: can embed any IPv4 address
	netip.MustParsePrefix("::ffff:0:0:0/96"), // SIIT: can embed any IPv4 address
}

// isPublic reports whether a is an ordinary, globally routed unicast address.
func isPublic(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
