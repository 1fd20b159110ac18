package skiplocktest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/skiplock/skiplock/skiplocktest"
)

func TestMain(m *testing.M) { skiplocktest.Main(m) }

// fakeTB stands in for the *testing.T a helper is given, recording what the helper
// reports instead of failing the real test. Everything else (Name, Cleanup, Logf,
// Context) goes to the real test.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit() // ends the helper's goroutine, as FailNow ends a test's
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeTB) FailNow()          { f.Fatalf("FailNow") }

// capture runs fn with a fakeTB on a goroutine of its own (so a Fatalf can end it)
// and returns the fakeTB once fn has returned or been ended.
func capture(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// wantFatal fails t unless the helper called Fatalf with a message containing every
// one of parts.
func (f *fakeTB) wantFatal(t *testing.T, parts ...string) {
	t.Helper()
	if f.fatal == "" {
		t.Fatalf("no Fatalf; want one containing %q (errors: %q)", parts, f.errors)
	}
	for _, p := range parts {
		if !strings.Contains(f.fatal, p) {
			t.Errorf("Fatalf message lacks %q; it is:\n%s", p, f.fatal)
		}
	}
}
