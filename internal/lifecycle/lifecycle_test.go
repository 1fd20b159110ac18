package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Ending ctx calls stop within its timeout and reports a stop cut short; closing
// stopped first calls nothing.
func TestStopWhenDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var bounded, wasLate bool
	StopWhenDone(ctx, nil, time.Hour, func(sctx context.Context) error {
		_, bounded = sctx.Deadline()
		return errors.New("cut short")
	}, func() { wasLate = true })
	if !bounded || !wasLate {
		t.Fatalf("ctx ended: stop bounded %v, late reported %v; want both", bounded, wasLate)
	}

	stopped := make(chan struct{})
	close(stopped)
	StopWhenDone(context.Background(), stopped, time.Hour, func(context.Context) error {
		t.Fatal("stop called after the stop finished")
		return nil
	}, func() { t.Fatal("late reported") })

	wasLate = false
	StopWhenDone(ctx, nil, time.Hour, func(context.Context) error { return nil }, func() { wasLate = true })
	if wasLate {
		t.Fatal("a stop that finished in time was reported late")
	}
}
