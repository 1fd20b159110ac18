// Package ident validates and quotes the PostgreSQL identifiers and names skiplock
// accepts from users: schema names, queue names and notification channels.
//
// Validation is deliberately narrower than what PostgreSQL accepts: letters, digits
// and underscores (plus '-' and '.' for queue names, which are data, not SQL), at most
// 63 bytes, starting with a letter or underscore. Identifiers are also always quoted
// when spliced into SQL, so validation and quoting are two independent defences.
package ident

import (
	"fmt"
	"strings"
)

// MaxLen is PostgreSQL's identifier limit (NAMEDATALEN - 1).
const MaxLen = 63

// Error reports an invalid name.
type Error struct {
	What   string // "schema", "queue", ...
	Name   string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid %s name %q: %s", e.What, e.Name, e.Reason)
}

// Validate checks an SQL identifier (schema or channel name).
func Validate(what, name string) error {
	return check(what, name, false)
}

// ValidateQueue checks a queue name. Queue names travel as data and as NOTIFY
// payloads, never as SQL text; '-' and '.' are allowed for readability.
func ValidateQueue(name string) error {
	return check("queue", name, true)
}

func check(what, name string, queue bool) error {
	if name == "" {
		return &Error{what, name, "must not be empty"}
	}
	if len(name) > MaxLen {
		return &Error{what, name, fmt.Sprintf("longer than %d bytes", MaxLen)}
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9', queue && (r == '-' || r == '.'):
			if i == 0 {
				return &Error{what, name, "must start with a letter or underscore"}
			}
		default:
			allowed := "letters, digits and underscores"
			if queue {
				allowed = "letters, digits, '_', '-' and '.'"
			}
			return &Error{what, name, fmt.Sprintf("character %q not allowed (use %s)", r, allowed)}
		}
	}
	if !queue && strings.HasPrefix(strings.ToLower(name), "pg_") {
		return &Error{what, name, "the pg_ prefix is reserved by PostgreSQL"}
	}
	return nil
}

// Quote returns name as a double-quoted SQL identifier.
func Quote(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// Channel returns the NOTIFY channel "<schema>.<suffix>", cut to PostgreSQL's
// identifier limit.
func Channel(schema, suffix string) string {
	ch := schema + "." + suffix
	if len(ch) > MaxLen {
		ch = ch[:MaxLen]
	}
	return ch
}
