package store

// uuid[] parameters in binary.
//
// Job and event ids travel through the store as strings. Given a []string for a
// uuid[] parameter, pgx first tries the binary format, fails, builds an error that
// formats the whole slice (fmt with %q), and only then sends the array as text, which
// the server parses element by element: several times the Go time of the same ids
// through uuidArg (BenchmarkUUIDArg). A completion sends two such arrays (ids and
// tokens) per batch, so on the hot path this encoding was a visible share of the Go
// side's CPU, which on a small machine is taken from the database
// (docs/benchmarks-archive.md, "The claim's token and the Go side's share").

import "github.com/jackc/pgx/v5/pgtype"

// uuidArg returns ss as a uuid[] parameter pgx sends in binary. A string that is not
// a uuid in the canonical form (8-4-4-4-12 hex digits) leaves ss as it is, sent as
// text, so the server judges it as it always did.
//
// The array holds pointers into one backing slice: pgx reads an array element by
// element as an interface value, and a pointer fits one where a 17-byte UUID took an
// allocation of its own per element.
func uuidArg(ss []string) any {
	vals := make([]pgtype.UUID, len(ss))
	out := make(pgtype.FlatArray[*pgtype.UUID], len(ss))
	for i, s := range ss {
		if !parseUUID(s, &vals[i].Bytes) {
			return ss
		}
		vals[i].Valid = true
		out[i] = &vals[i]
	}
	return out
}

// parseUUID decodes the canonical text form of a uuid into b.
func parseUUID(s string, b *[16]byte) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	bad := byte(0)
	for j, i := range uuidDigits {
		hi, lo := hexValue[s[i]], hexValue[s[i+1]]
		bad |= hi | lo
		b[j] = hi<<4 | lo
	}
	return bad&0xf0 == 0
}

// uuidDigits is where each byte's two hex digits start in the canonical form.
var uuidDigits = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// hexValue maps a hex digit to its value and anything else to 0xff.
var hexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c], t[c-'a'+'A'] = byte(c-'a'+10), byte(c-'a'+10)
	}
	return t
}()
