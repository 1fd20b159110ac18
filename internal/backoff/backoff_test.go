package backoff

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/hostclock"
)

func delays(b *Backoff, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.Next()
	}
	return out
}

func TestNextDoublesUpToMaxAndResetStartsOver(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	b := Backoff{Initial: 100 * ms, Max: time.Second}
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}
	if got := delays(&b, len(want)); !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	b.Reset()
	if got := delays(&b, 2); !slices.Equal(got, want[:2]) {
		t.Errorf("after Reset: delays %v, want %v", got, want[:2])
	}
}

func TestMaxBoundsEveryDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"Max not a power of two of Initial", Backoff{Initial: 3, Max: 10}, []time.Duration{3, 6, 10, 10}},
		{"Max below Initial", Backoff{Initial: 50, Max: 20}, []time.Duration{20, 20}},
		{"Max at the largest duration: no overflow", Backoff{Initial: 1 << 62, Max: math.MaxInt64},
			[]time.Duration{1 << 62, math.MaxInt64, math.MaxInt64}},
	}
	for _, c := range cases {
		if got := delays(&c.b, len(c.want)); !slices.Equal(got, c.want) {
			t.Errorf("%s: delays %v, want %v", c.name, got, c.want)
		}
	}
}

func TestJitterSpreadsEachDelayNotTheNext(t *testing.T) {
	t.Parallel()
	var seen []time.Duration
	b := Backoff{Initial: 10, Max: 40, Jitter: func(d time.Duration) time.Duration {
		seen = append(seen, d)
		return d + 1
	}}
	if got, want := delays(&b, 4), []time.Duration{11, 21, 41, 41}; !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	if want := []time.Duration{10, 20, 40, 40}; !slices.Equal(seen, want) {
		t.Errorf("Jitter was given %v, want the exact delays %v", seen, want)
	}

	h := Backoff{Initial: time.Second, Max: time.Minute, Jitter: hostclock.Jitter}
	for i, base := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if d := h.Next(); d < base-base/10 || d > base+base/10 {
			t.Errorf("delay %d with hostclock.Jitter: %v, want %v ±10%%", i, d, base)
		}
	}
}
