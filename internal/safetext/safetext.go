// Package safetext is skiplock's one policy for text it writes to PostgreSQL on a
// caller's behalf: last_error of jobs and outbox events, worker ids, relay errors and
// header values that come from handlers or publishers rather than from validated
// input.
//
// PostgreSQL's text refuses a NUL byte and invalid UTF-8 (SQLSTATE 22021), so a
// single handler returning errors.New("gateway said \xff\x00") used to make a whole
// completion batch fail, forever. Everything written through Clean is valid UTF-8,
// NUL-free and bounded, so such text can never be why a write fails.
package safetext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxBytes bounds stored text. Longer text is cut at a rune boundary and ends with
// a marker saying how much was cut.
const MaxBytes = 16 << 10

const marker = "… [truncated: %d of %d bytes shown]"

// Clean returns s as storable text: invalid UTF-8 sequences replaced by U+FFFD, NUL
// bytes replaced by U+FFFD too (so their place stays visible), and at most MaxBytes
// long including the truncation marker.
func Clean(s string) string {
	return CleanN(s, MaxBytes)
}

// CleanN is Clean with a bound of max bytes (at least 64).
func CleanN(s string, max int) string {
	if max < 64 {
		max = 64
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	total := len(s)
	cut := max - len(fmt.Sprintf(marker, max, total))
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(marker, cut, total)
}

// Error returns err's message as storable text. It never panics: an Error method
// that panics (a nil pointer receiver, say) yields a description of that panic
// instead. A nil error is "".
func Error(err error) string {
	return ErrorN(err, MaxBytes)
}

// ErrorN is Error with a bound of max bytes (at least 64), as CleanN is Clean's.
func ErrorN(err error, max int) (s string) {
	if err == nil {
		return ""
	}
	defer func() {
		if p := recover(); p != nil {
			s = CleanN(fmt.Sprintf("error of type %T whose Error method panicked: %v", err, p), max)
		}
	}()
	return CleanN(err.Error(), max)
}
