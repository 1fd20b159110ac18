package bench

// A latency histogram with logarithmic buckets, for workloads too long to keep every
// job's reading (W14 counts tens of millions of jobs per run). Each bucket is 2% wider
// than the one before, so a percentile read from it is within 2% of the exact one; it
// is lock-free, so the handlers of a hundred workers can add to it at once.

import (
	"math"
	"sync/atomic"
	"time"
)

const (
	histGrowth  = 1.02
	histBuckets = 1200 // 1 µs · 1.02^1200 ≈ 20,000 s: every latency a run can see
)

// logHist counts durations in buckets of 2% width from 1 µs up.
type logHist struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Uint64
}

// histBucket is the bucket that holds d.
func histBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(math.Log(us)/math.Log(histGrowth)), histBuckets-1)
}

// add counts one duration.
func (h *logHist) add(d time.Duration) {
	h.counts[histBucket(d)].Add(1)
	h.n.Add(1)
}

// count is how many durations were added.
func (h *logHist) count() uint64 { return h.n.Load() }

// quantile returns the upper edge of the bucket that holds the q-quantile (0 < q ≤ 1),
// in milliseconds; 0 when the histogram is empty.
func (h *logHist) quantile(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return math.Pow(histGrowth, float64(i+1)) / 1000
		}
	}
	return math.Pow(histGrowth, histBuckets) / 1000
}
