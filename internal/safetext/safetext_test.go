package safetext

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

type panicky struct{ p *string }

func (e panicky) Error() string { return *e.p }

func TestClean(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxBytes) // 2 bytes a rune: cut mid-rune unless careful
	cases := []struct {
		name, in string
		check    func(string) bool
	}{
		{"plain", "boom", func(s string) bool { return s == "boom" }},
		{"invalid utf8 and NUL", "gateway said \xff\x00", func(s string) bool { return s == "gateway said \uFFFD\uFFFD" }},
		{"long", long, func(s string) bool {
			return len(s) <= MaxBytes && strings.HasSuffix(s, "bytes shown]") && strings.Contains(s, "of 32768 bytes")
		}},
		{"long binary", strings.Repeat("\x00\xfe", MaxBytes), func(s string) bool { return len(s) <= MaxBytes }},
	}
	for _, c := range cases {
		got := Clean(c.in)
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || !c.check(got) {
			t.Errorf("%s: Clean gave %.80q (%d bytes)", c.name, got, len(got))
		}
	}
	if got := CleanN("abcdefghij", 1); got != "abcdefghij" {
		t.Errorf("CleanN below the floor cut short text: %q", got)
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	if Error(nil) != "" {
		t.Error("nil error should be empty text")
	}
	if got := Error(errors.New("x\x00")); got != "x\uFFFD" {
		t.Errorf("got %q", got)
	}
	got := Error(panicky{})
	if !strings.Contains(got, "panicked") || !strings.Contains(got, "safetext.panicky") {
		t.Errorf("a panicking Error method gave %q", got)
	}
	if got := ErrorN(errors.New(strings.Repeat("x\xff", 1000)), 100); len(got) > 100 || !utf8.ValidString(got) ||
		!strings.HasSuffix(got, "of 4000 bytes shown]") {
		t.Errorf("ErrorN of a long invalid message gave %q (%d bytes)", got, len(got))
	}
	if got := ErrorN(panicky{}, 64); len(got) > 64 || !strings.HasPrefix(got, "error of type safetext.pan") {
		t.Errorf("ErrorN of a panicking Error method gave %q (%d bytes)", got, len(got))
	}
}
