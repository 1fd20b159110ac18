package uuidv7

import (
	"sort"
	"testing"
	"time"
)

func TestLayoutAndOrder(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	var ids []string
	for i := 0; i < 1000; i++ {
		ids = append(ids, String(New(base, uint32(i))))
	}
	later := String(New(base.Add(time.Microsecond), 0))
	if !sort.StringsAreSorted(ids) {
		t.Fatal("a batch's ids are not in sequence order")
	}
	if later <= ids[len(ids)-1] {
		t.Fatalf("an id a microsecond later (%s) sorts before the batch (%s)", later, ids[len(ids)-1])
	}
	u := New(base, 5)
	if u[6]>>4 != 7 || u[8]>>6 != 2 {
		t.Fatalf("version %x variant %b", u[6]>>4, u[8]>>6)
	}
	if ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5]); ms != base.UnixMilli() {
		t.Fatalf("timestamp %d, want %d", ms, base.UnixMilli())
	}
}

func TestValid(t *testing.T) {
	for s, want := range map[string]bool{
		String(New(time.Now(), 1)):             true,
		"0191D0A2-0000-7000-8000-00000000000F": true,
		"":                                     false,
		"0191d0a2-0000-7000-8000-00000000000":  false, // 35 characters
		"0191d0a2-0000-7000-8000-00000000000g": false,
		"0191d0a200007000800000000000000000ab": false, // no hyphens
		"{0191d0a2-0000-7000-8000-0000000000}": false,
	} {
		if got := Valid(s); got != want {
			t.Errorf("Valid(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestFillMatchesNew: a batch filled at once has New's layout, position by position,
// differing only in the random bits, and no two ids alike.
func TestFillMatchesNew(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	ids := make([][16]byte, 3000)
	Fill(base, ids)
	seen := map[[16]byte]bool{}
	for i, id := range ids {
		want := New(base, uint32(i))
		for k := range 16 {
			mask := byte(0xff)
			if k >= 11 { // the 38 random bits: bytes 12..15 and byte 11's low 6 bits
				mask = 0
			}
			if k == 11 {
				mask = 0xc0
			}
			if id[k]&mask != want[k]&mask {
				t.Fatalf("id %d byte %d: %08b, want %08b under %08b", i, k, id[k], want[k], mask)
			}
		}
		if seen[id] {
			t.Fatalf("id %d repeats", i)
		}
		seen[id] = true
	}
}
