// Package redact is skiplock's one place for hiding credentials in connection
// strings before they are printed, logged or stored: broker and webhook URLs
// ("amqp://relay:secret@rabbit/", "nats://token@nats:4222", "https://u:p@host/"),
// whose whole user information is masked (URL, Error), and PostgreSQL connection
// strings in URL or keyword/value form, whose passwords are masked (DSN). Their text
// ends up in last_error columns, log pipelines, dashboards and terminals.
package redact

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Mask replaces the user information of a URL, or a password.
const Mask = "xxxxx"

// URL returns raw with the user information of each URL in it (user name and
// password: NATS takes a token as the user name) replaced by Mask. raw may be a
// comma-separated list of URLs, and need not parse. Everything up to the last "@"
// after the scheme, up to the next "scheme://", is masked, because a malformed
// password may hold "/", "?", "#" or ","; a URL with "@" in its path or query, or
// a list whose later entries lack a scheme (nats://h1,u:p@h2), is therefore
// over-masked, never leaked.
func URL(raw string) string {
	locs := urls(raw)
	// Text before the first URL: a URL without a scheme (user:pw@host:4222).
	lead := raw
	if len(locs) > 0 {
		lead = raw[:locs[0].scheme]
	}
	var secret []span
	if at := strings.LastIndex(lead, "@"); at >= 0 {
		secret = append(secret, span{0, at})
	}
	for _, u := range locs {
		if at := strings.LastIndex(raw[u.start:u.end], "@"); at >= 0 {
			secret = append(secret, span{u.start, u.start + at})
		}
	}
	return mask(raw, secret)
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

// DSN hides the passwords in a connection string, or in a message quoting one,
// for messages and logs: the userinfo password of each URL (postgres://, amqp://,
// nats://, …), the password and sslpassword parameters of a URL's query, and the
// password and sslpassword settings of the keyword=value form (host=x
// password='a b'). Anything else is kept as written. Both forms are looked for in
// the whole of s, since a message may quote either and a keyword's value may
// itself hold a URL.
func DSN(s string) string {
	secret := keywordSecrets(s)
	for _, u := range urls(s) {
		secret = append(secret, urlSecrets(s, u)...)
	}
	return mask(s, secret)
}

// span is the byte range s[start:end] of a string s.
type span struct{ start, end int }

// mask replaces each secret span of s, and each run of overlapping or touching
// ones, by Mask. An empty span still gets a Mask: an empty password field
// should look like any other.
func mask(s string, secret []span) string {
	if len(secret) == 0 {
		return s
	}
	slices.SortFunc(secret, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	next := 0 // the first byte of s not yet written or masked
	for i := 0; i < len(secret); {
		start, end := secret[i].start, secret[i].end
		for i++; i < len(secret) && secret[i].start <= end; i++ {
			end = max(end, secret[i].end)
		}
		b.WriteString(s[next:start])
		b.WriteString(Mask)
		next = end
	}
	b.WriteString(s[next:])
	return b.String()
}

// urlLoc locates one URL in a string: its scheme begins at scheme, and the
// rest, after "://", is [start, end), ending where the next URL's scheme begins.
type urlLoc struct{ scheme, start, end int }

// urls finds the URLs in s. The first "://" starts one whatever precedes it. A
// later "://" starts a new URL only when its scheme follows a space or
// punctuation that can precede a URL in a list or a message (",", "=", quotes,
// brackets), so a password holding "://" (user:a://b@host) stays within its
// own URL and is masked with it.
func urls(s string) []urlLoc {
	var out []urlLoc
	for i := 0; ; {
		k := strings.Index(s[i:], "://")
		if k < 0 {
			return out
		}
		k += i
		i = k + 3
		j := k
		for j > 0 && isSchemeByte(s[j-1]) {
			j--
		}
		if len(out) > 0 && (j == k || !isLetter(s[j]) || !strings.ContainsRune(" \t\n\r\v\f,;=\"'`([{<", rune(s[j-1]))) {
			continue
		}
		if n := len(out); n > 0 {
			out[n-1].end = j
		}
		out = append(out, urlLoc{j, k + 3, len(s)})
	}
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

func isSchemeByte(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// urlSecrets finds the passwords of the URL u of s.
//
// The userinfo password runs from the first ":" to the last "@". pgx, like libpq,
// ends the userinfo at the first "@" before a "/", so "?" and "#" may be part of
// a password (postgres://u:pa?ss@host); net/url ends it at the last "@" before a
// "/", "?" or "#"; and a malformed password may hold "/" or "@". The last "@" of
// the whole URL covers all of these; an "@" in the path or query, or in the text
// of a message after the URL, over-masks, never leaks.
//
// A query parameter starts after any "?" or "&", since a "?" inside the password
// may come before the real query, and its value runs to the next "&": pgx treats
// neither "?" nor "#" as special there. That "&" is looked for in the rest of s,
// not just in this URL: a value may hold what looks like the next URL
// (password=a,b://c).
func urlSecrets(s string, u urlLoc) []span {
	var out []span
	seg := s[u.start:u.end]
	if at := strings.LastIndex(seg, "@"); at >= 0 {
		if c := strings.IndexByte(seg[:at], ':'); c >= 0 {
			out = append(out, span{u.start + c + 1, u.start + at})
		}
	}
	for k := range len(seg) {
		if seg[k] != '?' && seg[k] != '&' {
			continue
		}
		param := seg[k+1:]
		eq := strings.IndexAny(param, "=?&")
		if eq < 0 || param[eq] != '=' || !isPasswordKey(param[:eq]) {
			continue
		}
		vstart := u.start + k + 1 + eq + 1
		vend := len(s)
		if amp := strings.IndexByte(s[vstart:], '&'); amp >= 0 {
			vend = vstart + amp
		}
		out = append(out, span{vstart, vend})
	}
	return out
}

// isPasswordKey reports whether a keyword or query key names a password. libpq
// matches keywords case-sensitively, and pgx percent-decodes query keys
// (pass%77ord) and trims their spaces; any case, a decoded key, and leading or
// trailing punctuation (a keyword quoted in a message: `password=…) are accepted
// too, which masks more, never less.
func isPasswordKey(k string) bool {
	if d, err := url.PathUnescape(k); err == nil {
		k = d
	}
	k = strings.ToLower(strings.TrimFunc(k, func(r rune) bool {
		return !(r < 0x80 && isSchemeByte(byte(r)) || r == '_')
	}))
	return k == "password" || k == "sslpassword"
}

// isSpace is libpq's isspace: any of these ends a keyword or an unquoted value.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// keywordSecrets finds the password values of the keyword=value form the way
// libpq reads it: a keyword is a run of non-space characters, spaces may
// surround the "=", and a value is either a run of non-space characters in
// which a backslash escapes the next character (password=x\ y is "x y"), or a
// single-quoted string in which a backslash escapes the next character
// ('it\'s', 'a\\'). An empty value, or one at the end of s, is found too.
func keywordSecrets(s string) []span {
	var out []span
	for i := 0; i < len(s); {
		if isSpace(s[i]) {
			i++
			continue
		}
		kstart := i
		for i < len(s) && !isSpace(s[i]) && s[i] != '=' {
			i++
		}
		key := s[kstart:i]
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if j == len(s) || s[j] != '=' {
			continue // a word of a message, not a keyword
		}
		j++
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		vstart := j
		vend, closed := valueEnd(s, vstart)
		if isPasswordKey(key) {
			out = append(out, span{vstart, vend})
		}
		i = vend
		if !closed {
			// libpq rejects an unterminated quote; read on after it, so a
			// message quoting such a string still has its password found.
			i = vstart + 1
		}
	}
	return out
}

// valueEnd returns the end of the keyword value starting at s[i], and whether
// a quoted value was closed (an unquoted one always is).
func valueEnd(s string, i int) (end int, closed bool) {
	if i < len(s) && s[i] == '\'' {
		for i++; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++ // the escaped character, if any
			case '\'':
				return i + 1, true
			}
		}
		return len(s), false
	}
	for i < len(s) && !isSpace(s[i]) {
		if s[i] == '\\' {
			i++ // the escaped character: even a space or the end of s
		}
		i++
	}
	return min(i, len(s)), true
}
