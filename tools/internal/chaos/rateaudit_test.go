package chaos

import (
	"testing"
	"time"
)

// The rate audit counts the starts of every window anchored at a start that closed
// before the limit was lifted, and the starts in the held period.
func TestRateWindows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var starts []time.Time
	for s := 0; s < 62; s++ { // 100 starts per second, 10 ms apart
		for i := 0; i < 100; i++ {
			starts = append(starts, t0.Add(time.Duration(s)*time.Second+time.Duration(i)*10*time.Millisecond))
		}
	}
	f := rateWindows(starts, t0, t0.Add(rateHold+ratePer+500*time.Millisecond))
	if f.max != 100 || f.total != 6000 {
		t.Errorf("even starts: max %d, total %d; want 100 and 6000", f.max, f.total)
	}
	// One extra start inside a second breaks the limit.
	extra := append([]time.Time{}, starts[:100]...)
	extra = append(extra, t0.Add(995*time.Millisecond))
	extra = append(extra, starts[100:]...)
	if f := rateWindows(extra, t0, t0.Add(rateHold+ratePer+500*time.Millisecond)); f.max != 101 {
		t.Errorf("with an extra start: max %d, want 101", f.max)
	}
	// Windows that close after the limit was lifted are not checked.
	if f := rateWindows(starts, t0, t0.Add(10*time.Second)); f.windows != 901 {
		t.Errorf("%d windows checked before the lift at 10s, want 901 (anchored at 0 … 9s)", f.windows)
	}
}
