// Package redact is skiplock's one place for hiding credentials in connection
// strings before they are printed, logged or stored: broker and webhook URLs
// ("amqp://relay:secret@rabbit/", "nats://token@nats:4222", "https://u:p@host/"),
// whose whole user information is masked (URL, Error), and PostgreSQL connection
// strings in URL or keyword/value form, whose passwords are masked (DSN). Their text
// ends up in last_error columns, log pipelines, dashboards and terminals.
package redact

import (
	"strconv"
	"strings"
)

// Mask replaces the user information of a URL.
const Mask = "xxxxx"

// URL returns raw with the user information of each URL in it (user name and
// password: NATS takes a token as the user name) replaced by Mask. raw may be a
// comma-separated list of URLs, and need not parse. Everything up to the last "@"
// after the scheme is masked, because a malformed password may hold "/", "?" or
// "#"; a URL with "@" in its path or query is therefore over-masked, never leaked.
func URL(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = one(p)
	}
	return strings.Join(parts, ",")
}

func one(s string) string {
	prefix, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	return prefix + Mask + rest[at:]
}

// Error returns err with every URL of raw in its text, as given or quoted, replaced
// by its redacted form. errors.Is and errors.As still see err; only the text
// changes. A nil err stays nil.
func Error(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	// The whole list first, then each URL of it.
	for _, p := range append([]string{raw}, strings.Split(raw, ",")...) {
		r := URL(p)
		if r == p {
			continue
		}
		q, rq := strconv.Quote(p), strconv.Quote(r)
		msg = strings.ReplaceAll(msg, q[1:len(q)-1], rq[1:len(rq)-1])
		msg = strings.ReplaceAll(msg, p, r)
	}
	return &redacted{msg: msg, err: err}
}

// redacted shows msg but unwraps to the original error.
type redacted struct {
	msg string
	err error
}

// Error is the redacted text.
func (e *redacted) Error() string { return e.msg }

// Unwrap returns the original error, for errors.Is and errors.As.
func (e *redacted) Unwrap() error { return e.err }

// Mask replaces a password wherever a connection string is shown.

// DSN hides the passwords in a connection string for messages and logs: the
// userinfo password of a URL (postgres://, amqp://, nats://, …), and the password
// and sslpassword settings of a URL's query or of the keyword=value form
// (host=x password='a b'). Anything else is kept as written.
func DSN(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		return s[:i+3] + redactURLRest(s[i+3:])
	}
	return redactKeywords(s)
}

// redactURLRest redacts what follows "scheme://": the password of the userinfo
// (up to the last '@' before the query, so a password holding '/' or '@' is still
// hidden), then the query's password parameters.
func redactURLRest(rest string) string {
	end := len(rest)
	if j := strings.IndexAny(rest, "?#"); j >= 0 {
		end = j
	}
	head, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(head, "@"); at >= 0 {
		if user, _, hasPW := strings.Cut(head[:at], ":"); hasPW {
			head = user + ":" + Mask + head[at:]
		}
	}
	query, isQuery := strings.CutPrefix(tail, "?")
	if !isQuery {
		return head + tail
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	params := strings.Split(query, "&")
	for i, p := range params {
		if k, _, ok := strings.Cut(p, "="); ok && isPasswordKey(k) {
			params[i] = k + "=" + Mask
		}
	}
	out := head + "?" + strings.Join(params, "&")
	if hasFrag {
		out += "#" + frag
	}
	return out
}

func isPasswordKey(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	return k == "password" || k == "sslpassword"
}

// redactKeywords redacts the keyword=value form, where a value is a run of
// non-space characters or a single-quoted string with backslash escapes, and
// spaces may surround the '='.
func redactKeywords(s string) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		// Copy the separating spaces, then read a keyword.
		if s[i] == ' ' || s[i] == '\t' || s[i] == '\n' {
			b.WriteByte(s[i])
			i++
			continue
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
			i++
		}
		key := s[start:i]
		// Spaces, '=', spaces.
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if j >= len(s) || s[j] != '=' {
			b.WriteString(key) // not a keyword=value pair: keep the word
			continue
		}
		j++
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		vstart := j
		if j < len(s) && s[j] == '\'' {
			j++
			for j < len(s) && s[j] != '\'' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(s)) // the closing quote
		} else {
			for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' {
				j++
			}
		}
		b.WriteString(s[start:vstart])
		if isPasswordKey(key) {
			b.WriteString(Mask)
		} else {
			b.WriteString(s[vstart:j])
		}
		i = j
	}
	return b.String()
}
