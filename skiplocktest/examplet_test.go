package skiplocktest_test

import (
	"context"
	"fmt"
	"testing"
)

// exampleTB stands in, in the examples, for the *testing.T a test is given (an
// example function has none). It fails loudly and runs cleanups at end.
type exampleTB struct {
	testing.TB // nil: only the methods below are used
	cleanups   []func()
}

func newExampleTB() *exampleTB { return &exampleTB{} }

func (e *exampleTB) Helper()                        {}
func (e *exampleTB) Name() string                   { return "Example" }
func (e *exampleTB) Context() context.Context       { return context.Background() }
func (e *exampleTB) Cleanup(f func())               { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Logf(string, ...any)            {}
func (e *exampleTB) Errorf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (e *exampleTB) Fatal(a ...any)                 { panic(fmt.Sprint(a...)) }

// end runs the cleanups, last registered first, as a test's end does.
func (e *exampleTB) end() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
