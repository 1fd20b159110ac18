package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
)

// buckets are finished counts on a grid of equal time buckets ending with the
// current (partial) one.
type buckets struct {
	starts                       []time.Time
	size                         time.Duration
	succeeded, failed, cancelled []int64
}

// bucketize sums points (of queue, or of every queue when queue is "") into
// window/size+1 buckets aligned to size, the last holding now.
func bucketize(points []skiplock.ThroughputPoint, now time.Time, window, size time.Duration, queue string) buckets {
	n := int(window/size) + 1
	first := now.Truncate(size).Add(-time.Duration(n-1) * size)
	b := buckets{size: size, starts: make([]time.Time, n), succeeded: make([]int64, n), failed: make([]int64, n), cancelled: make([]int64, n)}
	for i := range b.starts {
		b.starts[i] = first.Add(time.Duration(i) * size)
	}
	for _, p := range points {
		if queue != "" && p.Queue != queue {
			continue
		}
		d := p.Start.Sub(first)
		if d < 0 {
			continue
		}
		i := int(d / size)
		if i >= n {
			continue
		}
		b.succeeded[i] += p.Succeeded
		b.failed[i] += p.Failed
		b.cancelled[i] += p.Cancelled
	}
	return b
}

type series struct {
	name   string
	class  string // the CSS class that colours it
	values []int64
}

// barChart draws stacked bars of series over b's buckets as an inline SVG, with
// its largest value on the y axis, the first and last bucket's times on the x axis,
// and each bar's figures in a tooltip (<title>). No script, no style attribute:
// colours come from the stylesheet's classes.
func barChart(testid, label string, b buckets, ss []series, w, h int) template.HTML {
	const left, right, top, bottom = 40, 8, 10, 20
	n := len(b.starts)
	var peak int64 = 1
	for i := 0; i < n; i++ {
		var sum int64
		for _, s := range ss {
			sum += s.values[i]
		}
		peak = max(peak, sum)
	}
	plotW, plotH := float64(w-left-right), float64(h-top-bottom)
	slot := plotW / float64(n)
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="chart" data-testid="%s" id="%s" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		testid, testid, w, h, html.EscapeString(label))
	fmt.Fprintf(&sb, `<title>%s</title>`, html.EscapeString(label))
	// Axes and the peak's grid line.
	fmt.Fprintf(&sb, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, left, h-bottom, w-right, h-bottom)
	fmt.Fprintf(&sb, `<line class="grid" x1="%d" y1="%d" x2="%d" y2="%d"/>`, left, top, w-right, top)
	fmt.Fprintf(&sb, `<text class="tick" x="%d" y="%d" text-anchor="end">%d</text>`, left-4, top+4, peak)
	fmt.Fprintf(&sb, `<text class="tick" x="%d" y="%d" text-anchor="end">0</text>`, left-4, h-bottom)
	for i := 0; i < n; i++ {
		x := float64(left) + float64(i)*slot + slot*0.1
		y := float64(h - bottom)
		var parts []string
		fmt.Fprintf(&sb, `<g class="bar">`)
		for _, s := range ss {
			v := s.values[i]
			parts = append(parts, fmt.Sprintf("%d %s", v, s.name))
			if v == 0 {
				continue
			}
			bh := plotH * float64(v) / float64(peak)
			y -= bh
			fmt.Fprintf(&sb, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, s.class, x, y, slot*0.8, bh)
		}
		// An invisible full-height target, so the tooltip shows on empty buckets too.
		fmt.Fprintf(&sb, `<rect class="hit" x="%.1f" y="%d" width="%.1f" height="%.0f"><title>%s–%s UTC: %s</title></rect>`,
			x, top, slot*0.8, plotH, b.starts[i].UTC().Format("15:04"), b.starts[i].Add(b.size).UTC().Format("15:04"),
			html.EscapeString(strings.Join(parts, ", ")))
		sb.WriteString(`</g>`)
	}
	fmt.Fprintf(&sb, `<text class="tick" x="%d" y="%d">%s</text>`, left, h-4, b.starts[0].UTC().Format("15:04"))
	fmt.Fprintf(&sb, `<text class="tick" x="%d" y="%d" text-anchor="end">%s UTC</text>`, w-right, h-4, b.starts[n-1].UTC().Format("15:04"))
	// The legend.
	lx := left + 8
	for _, s := range ss {
		fmt.Fprintf(&sb, `<rect class="%s" x="%d" y="%d" width="8" height="8"/><text class="tick" x="%d" y="%d">%s</text>`,
			s.class, lx, top+2, lx+11, top+10, html.EscapeString(s.name))
		lx += 16 + 7*len(s.name)
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String())
}

// sparkline draws a queue's succeeded and failed jobs per bucket, small and without
// axes, for the overview's queue table.
func sparkline(queue string, b buckets) template.HTML {
	const w, h = 104, 22
	n := len(b.starts)
	var peak, succ, fail int64 = 1, 0, 0
	for i := 0; i < n; i++ {
		peak = max(peak, b.succeeded[i]+b.failed[i])
		succ += b.succeeded[i]
		fail += b.failed[i]
	}
	slot := float64(w) / float64(n)
	label := fmt.Sprintf("%s: %d succeeded, %d failed in the last hour", queue, succ, fail)
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="spark" data-testid="queue-sparkline" viewBox="0 0 %d %d" role="img" aria-label="%s"><title>%s</title>`,
		w, h, html.EscapeString(label), html.EscapeString(label))
	for i := 0; i < n; i++ {
		x, y := float64(i)*slot+slot*0.1, float64(h)
		for _, p := range []struct {
			v     int64
			class string
		}{{b.succeeded[i], "s-succeeded"}, {b.failed[i], "s-failed"}} {
			if p.v == 0 {
				continue
			}
			bh := max(1, float64(h)*float64(p.v)/float64(peak))
			y -= bh
			fmt.Fprintf(&sb, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, p.class, x, y, slot*0.8, bh)
		}
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String())
}
