package bench

// W10's judgement: the samples cut into windows, and the verdict on them.

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// w10Split computes the windows from the samples and the observer's marks, and the
// latencies of every job.
func w10Split(plan w10Plan, start time.Time, samples []w10Sample, marks []w10Mark) ([]W10Window, *latencies) {
	per := make([]latencies, plan.windows)
	enq := make([]latencies, plan.windows)
	queue := make([]latencies, plan.windows)
	all := &latencies{}
	for _, s := range samples {
		d := s.started.Sub(s.begin)
		all.add(d)
		k := min(max(int(s.begin.Sub(start)/plan.window), 0), plan.windows-1)
		per[k].add(d)
		enq[k].add(s.enqueued.Sub(s.begin))
		queue[k].add(max(s.started.Sub(s.enqueued), 0))
	}
	secs := plan.window.Seconds()
	out := make([]W10Window, plan.windows)
	for k := range out {
		var pr, er, qr Result
		per[k].fill(&pr)
		enq[k].fill(&er)
		queue[k].fill(&qr)
		claims := marks[k+1].claims - marks[k].claims
		w := W10Window{Phase: plan.phase(k), StartS: float64(k) * secs, Offered: len(per[k].d),
			OfferedPerSec: float64(len(per[k].d)) / secs, CompletedPerSec: float64(marks[k+1].succeeded-marks[k].succeeded) / secs,
			P50ms: pr.P50ms, P99ms: pr.P99ms, EnqueueP99ms: er.P99ms, QueueP99ms: qr.P99ms, DeadTuples: marks[k+1].dead, Claims: claims,
			IndexReadsPerSec:  float64(marks[k+1].indexReads-marks[k].indexReads) / secs,
			CheckpointBuffers: marks[k+1].ckptBuffers - marks[k].ckptBuffers, Passes: marks[k+1].passes - marks[k].passes,
			WALFPI: marks[k+1].wal.fpi - marks[k].wal.fpi, WALSyncs: marks[k+1].wal.syncs - marks[k].wal.syncs}
		if n := len(per[k].d); n > 0 {
			w.WALBytesPerJob = float64(marks[k+1].wal.bytes-marks[k].wal.bytes) / float64(n)
		}
		if claims > 0 {
			w.ClaimMeanMs = float64((marks[k+1].claimTime - marks[k].claimTime).Microseconds()) / 1000 / float64(claims)
		}
		out[k] = w
	}
	return out, all
}

// w10Verdict is W10's decision and the figures it rests on.
type w10Verdict struct {
	baseP99, pinP99Max, ratio float64
	slow                      []string // windows below the completed share
	behind                    []string // windows whose offered rate the generator missed
	over                      int      // pin windows above the p99 bound
	// overInEnqueue: of those, the windows whose Enqueue calls alone (the
	// application's insert and durable commit) already had a p99 above the bound;
	// overInCheckpoint, those in which the checkpointer was writing.
	overInEnqueue, overInCheckpoint int
	// baseQueueP99 is the median of the baseline windows' queue p99 (from the Enqueue
	// call's return to the handler), and queueOver the pin windows whose queue p99
	// went above w10P99Factor times it: the queue's own part of the rule.
	baseQueueP99 float64
	queueOver    int
	// pinP99Median is the median of the pin windows' p99. A baseline above it was
	// disturbed by something other than the pin (the pin only adds work), and a rule
	// relative to it proves nothing: such a run is inconclusive, not met.
	pinP99Median float64
	// control: the run held no pin (W10C); the judged windows are its control phase.
	control bool
}

// disturbed reports whether the baseline's p99 is above the median pin window's.
func (v w10Verdict) disturbed() bool { return v.baseP99 > v.pinP99Median && v.pinP99Median > 0 }

func (v w10Verdict) met() bool {
	return len(v.slow) == 0 && len(v.behind) == 0 && v.over == 0 && v.baseP99 > 0 && !v.disturbed()
}

// inconclusive is a run that would have met the rule against a disturbed baseline.
func (v w10Verdict) inconclusive() bool {
	return len(v.slow) == 0 && len(v.behind) == 0 && v.over == 0 && v.disturbed()
}

func (v w10Verdict) String() string {
	var parts []string
	// A control's windows are judged by the same rule, but it has no pin to blame:
	// the verdict says what the rule would have said, and names the phase for what it is.
	phase := "pin"
	if v.control {
		phase = "control"
		parts = append(parts, "CONTROL, no pin held: W10's rule applied to the same timeline would be")
	}
	switch {
	case v.met():
		parts = append(parts, "MET")
	case v.inconclusive():
		parts = append(parts, fmt.Sprintf("INCONCLUSIVE: the baseline's p99 (%.2f ms) is above the median %s window's (%.2f ms), so "+
			"something other than the %s slowed the baseline and the rule, relative to it, proves nothing: run it again on a quieter machine",
			v.baseP99, phase, v.pinP99Median, phase))
	default:
		parts = append(parts, "missed")
	}
	if v.control {
		parts = []string{strings.Join(parts, " ")}
	}
	parts = append(parts, fmt.Sprintf("%s p99 max %.2f ms = %.2f× the baseline's %.2f ms (bound %g×; %d %s windows above it)",
		phase, v.pinP99Max, v.ratio, v.baseP99, w10P99Factor, v.over, phase))
	if v.over > 0 {
		parts = append(parts, fmt.Sprintf("in %d of those the Enqueue calls alone (insert and durable commit) had a p99 above the bound, and in %d the checkpointer was writing",
			v.overInEnqueue, v.overInCheckpoint))
	}
	parts = append(parts, fmt.Sprintf("the queue's own part (Enqueue returned → handler): %d %s windows above %g× its baseline p99 of %.2f ms",
		v.queueOver, phase, w10P99Factor, v.baseQueueP99))
	if len(v.slow) > 0 {
		parts = append(parts, fmt.Sprintf("completed below %.0f%% of offered in %d windows (%s)", 100*w10RateShare, len(v.slow), firstFew(v.slow, 5)))
	} else {
		parts = append(parts, fmt.Sprintf("every window completed ≥ %.0f%% of offered", 100*w10RateShare))
	}
	if len(v.behind) > 0 {
		parts = append(parts, fmt.Sprintf("the generator offered below %.0f%% of %d jobs/s in %d windows (%s): the machine, not the queue, held it back",
			100*w10RateShare, w10Rate, len(v.behind), firstFew(v.behind, 5)))
	}
	return strings.Join(parts, "; ")
}

// at names a window in the verdict's lists: its phase and start.
func (w W10Window) at() string { return fmt.Sprintf("%s @%.0fs", w.Phase, w.StartS) }

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func firstFew(s []string, n int) string {
	if len(s) > n {
		return strings.Join(s[:n], ", ") + ", …"
	}
	return strings.Join(s, ", ")
}

// judgeW10 decides: every window after the warm-up phase completes at least w10RateShare
// of what was offered in it (and the generator offered at least that share of
// w10Rate), and every pin window's p99 stays within w10P99Factor of the baseline p99,
// the median of the baseline windows' p99 — unless that baseline is above the median
// pin window's p99 (disturbed): then the run is inconclusive.
func judgeW10(plan w10Plan, ws []W10Window) w10Verdict {
	var v w10Verdict
	var base, baseQueue, pin []float64
	for _, w := range ws {
		switch w.Phase {
		case W10Baseline:
			base = append(base, w.P99ms)
			baseQueue = append(baseQueue, w.QueueP99ms)
		case W10Pin, W10Control:
			v.pinP99Max = max(v.pinP99Max, w.P99ms)
			pin = append(pin, w.P99ms)
		}
		if w.Phase == W10Warmup {
			continue
		}
		at := w.at()
		if w.CompletedPerSec < w10RateShare*w.OfferedPerSec {
			v.slow = append(v.slow, at)
		}
		if w.OfferedPerSec < w10RateShare*w10Rate {
			v.behind = append(v.behind, at)
		}
	}
	if len(base) > 0 {
		v.baseP99, v.baseQueueP99 = median(base), median(baseQueue)
	}
	if v.baseP99 > 0 {
		v.ratio = v.pinP99Max / v.baseP99
	}
	if len(pin) > 0 {
		v.pinP99Median = median(pin)
	}
	v.control = plan.control
	for _, w := range ws {
		if w.Phase != W10Pin && w.Phase != W10Control {
			continue
		}
		if w.P99ms > w10P99Factor*v.baseP99 {
			v.over++
			if w.EnqueueP99ms > w10P99Factor*v.baseP99 {
				v.overInEnqueue++
			}
			if w.CheckpointBuffers > 0 {
				v.overInCheckpoint++
			}
		}
		if w.QueueP99ms > w10P99Factor*v.baseQueueP99 {
			v.queueOver++
		}
	}
	return v
}
