package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

func TestUUIDArg(t *testing.T) {
	t.Parallel()
	ids := []string{"0192f1e4-7a3b-7c2d-8e9f-0a1b2c3d4e5f", "FFFFFFFF-0000-4000-A000-123456789ABC"}
	got, ok := uuidArg(ids).(pgtype.FlatArray[*pgtype.UUID])
	if !ok || len(got) != 2 {
		t.Fatalf("uuidArg(%q) = %#v, want two *pgtype.UUID", ids, uuidArg(ids))
	}
	for i, id := range ids {
		v, err := got[i].Value()
		if err != nil || !got[i].Valid || v != strings.ToLower(id) {
			t.Fatalf("uuid %d reads %v (%v), want %s", i, v, err, strings.ToLower(id))
		}
	}
	// Anything but the canonical form stays text, for the server to judge.
	for _, bad := range []string{"", "not-a-uuid", "0192f1e47a3b7c2d8e9f0a1b2c3d4e5f", "0192f1e4-7a3b-7c2d-8e9f-0a1b2c3d4e5g",
		"0192f1e4x7a3b-7c2d-8e9f-0a1b2c3d4e5f", "{0192f1e4-7a3b-7c2d-8e9f-0a1b2c3d4e5}"} {
		in := []string{ids[0], bad}
		if s, ok := uuidArg(in).([]string); !ok || len(s) != 2 || s[1] != bad {
			t.Fatalf("uuidArg with %q = %#v, want the strings back", bad, uuidArg(in))
		}
	}
}

// BenchmarkUUIDArg compares the encoding of a 1,000-id uuid[] parameter given as
// strings (pgx tries binary, fails, and falls back to text) and through uuidArg.
func BenchmarkUUIDArg(b *testing.B) {
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("0192f1e4-7a3b-7c2d-8e9f-0a1b2c3d%04x", i)
	}
	m := pgtype.NewMap()
	encode := func(b *testing.B, v func() any) {
		for b.Loop() {
			x := v()
			if _, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, x, nil); err != nil {
				if _, err := m.Encode(pgtype.UUIDArrayOID, pgtype.TextFormatCode, x, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("strings", func(b *testing.B) { encode(b, func() any { return ids }) })
	b.Run("uuidArg", func(b *testing.B) { encode(b, func() any { return uuidArg(ids) }) })
}
