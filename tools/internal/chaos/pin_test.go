package chaos

import (
	"strings"
	"testing"
	"time"
)

// The mvcc-pin verdict: the median of the pin windows' p99 must stay within
// max(2 × reference, reference + 50 ms), the reference the median of the baseline
// windows' p99 or the recovery window's if higher, and every window must complete
// 90% of what was offered in it.
func TestJudgePin(t *testing.T) {
	t.Parallel()
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	recovery := 0.0 // the recovery window's p99 when set; else base1
	windows := func(base1, base2 float64, pin ...float64) []pinWindowStats {
		ws := []pinWindowStats{
			{phase: "baseline", secs: 10, offered: 8000, completed: 8000, p50: ms(2), p99: ms(base1)},
			{phase: "baseline", from: 10 * time.Second, secs: 10, offered: 8000, completed: 8000, p50: ms(2), p99: ms(base2)},
		}
		for i, p := range pin {
			ws = append(ws, pinWindowStats{phase: "pin", from: time.Duration(20+10*i) * time.Second, secs: 10, offered: 8000, completed: 8000, p50: ms(3), p99: ms(p)})
		}
		rec := base1
		if recovery > 0 {
			rec = recovery
		}
		return append(ws, pinWindowStats{phase: "recovery", from: time.Duration(20+10*len(pin)) * time.Second, secs: 10, offered: 8000, completed: 8000, p99: ms(rec)})
	}
	// The machine slowed down through the pin and stayed slow after it (the CI run
	// that led to the recovery reference): its recovery, 195 ms, sets the bound.
	recovery = 194.88
	slowed := windows(111.28, 123.62, 143.07, 290.29, 237.01, 363.77, 325.82, 205.18)
	recovery = 0
	for _, tc := range []struct {
		name string
		ws   []pinWindowStats
		want string // a violation containing this; "" for none
	}{
		// Baseline median 5 ms: the floor decides, 55 ms.
		{"flat", windows(4, 6, 5, 7, 55), ""},
		{"floor", windows(4, 6, 5, 55.5, 56), "raised pickup p99 to 55.50 ms, above its bound of 55.00 ms (windows above it: pin @30s 55.5 ms, pin @40s 56.0 ms)"},
		// Baseline median 60 ms: twice it decides, 120 ms.
		{"factor", windows(58, 62, 90, 120, 100), ""},
		// One window's burst does not decide; growth through the pin does.
		{"one burst", windows(58, 62, 90, 90, 400, 95), ""},
		{"grown", windows(58, 62, 90, 121, 160, 320), "raised pickup p99 to 140.50 ms"},
		{"no baseline", windows(0, 0, 1), "no baseline pickup latency"},
		{"machine slowed", slowed, ""},
		// A recovery as slow as the baseline leaves the baseline in charge.
		{"grown, recovered", windows(58, 62, 90, 121, 160, 320, 330), "bound of 120.00 ms"},
	} {
		row := &Row{}
		judgePin(tc.ws, row)
		got := strings.Join(row.Violations, "; ")
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: violations %q, want %q", tc.name, got, tc.want)
		}
		if len(row.Pickup) != len(tc.ws)+2 || !strings.HasPrefix(row.Pickup[len(row.Pickup)-1], "pickup p99 (median of windows): baseline") {
			t.Errorf("%s: pickup lines %q", tc.name, row.Pickup)
		}
	}
	ws := windows(4, 6, 5)
	ws[3].completed = 7100 // 88.75% in the recovery window
	row := &Row{}
	judgePin(ws, row)
	if len(row.Violations) != 1 || !strings.Contains(row.Violations[0], "completed below 90% of offered in 1 windows (recovery @30s 710 of 800/s)") {
		t.Errorf("slow window: %q", row.Violations)
	}
}
