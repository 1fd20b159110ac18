// Package validate holds the input rules that the root package and the outbox share,
// so a job kind and an event type are held to the same standard. Each check returns
// the reason the value is refused, or "" when it is acceptable; callers wrap the
// reason in their typed validation error.
package validate

import (
	"fmt"
	"reflect"
	"unicode/utf8"
)

// Name checks a name-like field (a job kind, an event type, an aggregate id, a header
// name): non-empty unless optional, at most max bytes, valid UTF-8, and free of
// control characters, which would make logs and CLI output misleading.
func Name(v string, max int, optional bool) string {
	switch {
	case v == "" && !optional:
		return "must not be empty"
	case len(v) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case !utf8.ValidString(v):
		return "not valid UTF-8"
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return "contains a control character"
		}
	}
	return ""
}

// IsNil reports whether v is nil or an interface holding a nil pointer, map, slice,
// channel or func: a value (a DB, a worker, a clock, a publisher) whose methods
// would dereference nil, so callers refuse it with a validation error instead of a
// panic deep inside.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
