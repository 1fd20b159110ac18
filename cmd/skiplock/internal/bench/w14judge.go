package bench

// W14's judgement: the disturbed run held beside its control, window by window.

import (
	"fmt"
	"strings"
)

const (
	// w14P99Factor bounds the disturbed windows' median p99 against the control's
	// median p99 over the same windows.
	w14P99Factor = 1.5
	// w14TrendFactor bounds a run's drift: the median p99 of its last windows against
	// that of its "before" phase.
	w14TrendFactor = 1.25
	// w14RecoverWindows is how many windows after the release the size and dead tuples
	// have to be back within w14Recovered of the control's.
	w14RecoverWindows = 5
	w14Recovered      = 0.10
	// w14DeadFloor: dead-tuple counts this close are equal whatever their ratio (a
	// control's count near 0 would make any ratio fail).
	w14DeadFloor = 10000
	// w14RateShareMet is the share of the rate every window must offer, and
	// w14BacklogShare the backlog (offered so far, not yet completed) a window may end
	// with, as a share of what it offered: more is a queue falling behind its load.
	w14RateShareMet = 0.95
	w14BacklogShare = 0.5
)

// w14Windows prints as a table in the text output and as an array in JSON.
type w14Windows []W14Window

func (ws w14Windows) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n       %-7s %7s %4s %6s %9s %11s %8s %8s %8s %11s %11s %9s %9s %6s %7s %9s %10s %6s",
		"phase", "start s", "snap", "read s", "offered/s", "completed/s", "p50 ms", "p99 ms", "enq p99", "dead tuples", "live tuples",
		"table MB", "index MB", "passes", "claims", "claim ms", "retained/s", "behind")
	for _, w := range ws {
		snap, read := "", ""
		if w.Snapshot {
			snap = "held"
		}
		if w.Read {
			read = fmt.Sprintf("%.1f", w.ReadS)
		}
		fmt.Fprintf(&b, "\n       %-7s %7.1f %4s %6s %9.0f %11.0f %8.2f %8.2f %8.2f %11d %11d %9.1f %9.1f %6d %7d %9.2f %10.0f %6d",
			w.Phase, w.StartS, snap, read, w.OfferedPerSec, w.CompletedPerSec, w.P50ms, w.P99ms, w.EnqueueP99ms, w.DeadTuples, w.LiveTuples,
			w.TableMB, w.IndexMB, w.Passes, w.Claims, w.ClaimMeanMs, w.RetainedPerSec, w.RetentionBehind)
	}
	return b.String()
}

// w14Side is what the verdict reads off one run.
type w14Side struct {
	slow, behind []string // windows that ended with a backlog above w14BacklogShare; windows the generator offered below the rate
	trend        float64  // median p99 of the last windows ÷ that of the before phase
	// passP99, calmP99: the median p99 of the windows in which a vacuum or analyze
	// finished, and of the others (the re-plan bursts' share of the tail).
	passP99, calmP99 float64
	passes           int64
}

// w14Verdict is W14's decision and the figures it rests on.
type w14Verdict struct {
	control, disturbed w14Side
	// p99 over the disturbed windows (the snapshot held, or an analytic read started):
	// the disturbed run's median, and the control's over the same windows.
	disturbedP99, controlP99, ratio float64
	// At the end of the w14RecoverWindows-th window after the release: each run's
	// table + index size (MB) and dead tuples.
	recoverAt                    int
	sizeD, sizeC                 float64
	deadD, deadC                 int64
	peakSizeD, peakDeadD         float64
	sizeRecovered, deadRecovered bool
}

func (v w14Verdict) trendOK() bool {
	return v.control.trend <= w14TrendFactor && v.disturbed.trend <= w14TrendFactor
}

func (v w14Verdict) met() bool {
	return v.ratio > 0 && v.ratio <= w14P99Factor && v.trendOK() && v.sizeRecovered && v.deadRecovered &&
		len(v.disturbed.slow) == 0 && len(v.disturbed.behind) == 0
}

func (v w14Verdict) String() string {
	var parts []string
	if v.met() {
		parts = append(parts, "MET")
	} else {
		parts = append(parts, "missed")
	}
	parts = append(parts, fmt.Sprintf("disturbed windows' median p99 %.2f ms = %.2f× the control's %.2f ms over the same windows (bound %g×)",
		v.disturbedP99, v.ratio, v.controlP99, w14P99Factor))
	parts = append(parts, fmt.Sprintf("drift (median p99 of the last %d windows ÷ the before phase's): control %.2f×, disturbed %.2f× (bound %g×)",
		w14RecoverWindows, v.control.trend, v.disturbed.trend, w14TrendFactor))
	parts = append(parts, fmt.Sprintf("%d windows after the release: table+indexes %.1f MB vs the control's %.1f MB (peak %.1f MB), dead tuples %d vs %d (peak %.0f); recovered: size %v, dead tuples %v (within %.0f%%)",
		w14RecoverWindows, v.sizeD, v.sizeC, v.peakSizeD, v.deadD, v.deadC, v.peakDeadD, v.sizeRecovered, v.deadRecovered, 100*w14Recovered))
	for _, s := range []struct {
		name string
		side w14Side
	}{{"control", v.control}, {"disturbed", v.disturbed}} {
		line := fmt.Sprintf("%s: no vacuum or analyze finished", s.name)
		if s.side.passes > 0 {
			line = fmt.Sprintf("%s: %d vacuum/analyze passes; median p99 %.2f ms in the windows with one, %.2f ms in the others", s.name, s.side.passes, s.side.passP99, s.side.calmP99)
		}
		if len(s.side.slow) > 0 {
			line += fmt.Sprintf("; fell behind (a backlog above %.0f%% of a window's jobs) in %d windows (%s)", 100*w14BacklogShare, len(s.side.slow), firstFew(s.side.slow, 4))
		}
		if len(s.side.behind) > 0 {
			line += fmt.Sprintf("; offered below %.0f%% of the rate in %d windows (%s): the machine, not the queue, held the generator back", 100*w14RateShareMet, len(s.side.behind), firstFew(s.side.behind, 4))
		}
		parts = append(parts, line)
	}
	if len(v.control.slow)+len(v.control.behind) > 0 {
		parts = append(parts, "the control itself did not keep up with the rate: this machine cannot sustain it, with or without the disturbances")
	}
	return strings.Join(parts, "; ")
}

// judgeW14 holds the disturbed run's windows beside the control's.
func judgeW14(plan w14Plan, rate float64, control, disturbed []W14Window) w14Verdict {
	var v w14Verdict
	v.control = w14Judge(plan, rate, control)
	v.disturbed = w14Judge(plan, rate, disturbed)
	var d, c []float64
	for k := plan.warm; k < min(len(control), len(disturbed)); k++ {
		if disturbed[k].Snapshot || disturbed[k].Read {
			d = append(d, disturbed[k].P99ms)
			c = append(c, control[k].P99ms)
		}
	}
	if len(d) > 0 {
		v.disturbedP99, v.controlP99 = median(d), median(c)
	}
	if v.controlP99 > 0 {
		v.ratio = v.disturbedP99 / v.controlP99
	}
	v.recoverAt = min(plan.warm+plan.before+plan.middle+w14RecoverWindows-1, plan.total-1)
	if v.recoverAt < len(control) && v.recoverAt < len(disturbed) {
		wd, wc := disturbed[v.recoverAt], control[v.recoverAt]
		v.sizeD, v.sizeC = wd.TableMB+wd.IndexMB, wc.TableMB+wc.IndexMB
		v.deadD, v.deadC = wd.DeadTuples, wc.DeadTuples
		v.sizeRecovered = v.sizeD <= (1+w14Recovered)*v.sizeC
		v.deadRecovered = float64(v.deadD) <= (1+w14Recovered)*float64(v.deadC) || v.deadD-v.deadC <= w14DeadFloor
	}
	for _, w := range disturbed {
		v.peakSizeD = max(v.peakSizeD, w.TableMB+w.IndexMB)
		v.peakDeadD = max(v.peakDeadD, float64(w.DeadTuples))
	}
	return v
}

// w14Judge reads one run's side of the verdict.
func w14Judge(plan w14Plan, rate float64, ws []W14Window) w14Side {
	var s w14Side
	var before, last, pass, calm []float64
	var backlog float64
	secs := plan.window.Seconds()
	for k, w := range ws {
		s.passes += w.Passes
		backlog = max(backlog+(w.OfferedPerSec-w.CompletedPerSec)*secs, 0)
		if w.Phase == W14Warmup {
			continue
		}
		at := fmt.Sprintf("%s @%.1fs", w.Phase, w.StartS)
		if backlog > w14BacklogShare*w.OfferedPerSec*secs {
			s.slow = append(s.slow, at)
		}
		if w.OfferedPerSec < w14RateShareMet*rate {
			s.behind = append(s.behind, at)
		}
		if w.Phase == W14Before {
			before = append(before, w.P99ms)
		}
		if k >= len(ws)-w14RecoverWindows {
			last = append(last, w.P99ms)
		}
		if w.Passes > 0 {
			pass = append(pass, w.P99ms)
		} else {
			calm = append(calm, w.P99ms)
		}
	}
	if len(before) > 0 && len(last) > 0 && median(before) > 0 {
		s.trend = median(last) / median(before)
	}
	if len(pass) > 0 {
		s.passP99 = median(pass)
	}
	if len(calm) > 0 {
		s.calmP99 = median(calm)
	}
	return s
}
