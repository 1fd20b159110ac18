package chaos

import (
	"testing"
	"time"
)

// The audit's sweep counts half-open slots per bucket: a slot that ends at the very
// instant another starts does not overlap it, a third overlapping slot of a key with
// limit 2 is reported, and jobs without a key count toward the queue only.
func TestPeaks(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sl := func(key string, from, to int) slot { return slot{job: key, key: key, from: at(from), to: at(to)} }
	limitOf := func(string) int { return 2 }

	ps := peaks([]slot{sl("a", 0, 10), sl("a", 10, 20), sl("a", 5, 15), sl("", 0, 20), sl("b", 3, 4)}, 4, limitOf)
	if p := ps["a"]; p.max != 2 || p.overN != 0 {
		t.Errorf("key a: max %d, %d instants over; want 2 and 0 (touching slots do not overlap)", p.max, p.overN)
	}
	if p := ps[""]; p.max != 3 || p.overN != 0 {
		t.Errorf("queue: max %d, %d over; want 3 and 0", p.max, p.overN)
	}
	if _, ok := ps["x"]; ok {
		t.Error("a bucket appeared for a key no slot has")
	}

	ps = peaks([]slot{sl("a", 0, 10), sl("a", 2, 12), sl("a", 9, 11), sl("a", 11, 30)}, 10, limitOf)
	p := ps["a"]
	if p.max != 3 || p.overN != 1 || len(p.over) != 1 || !p.over[0].at.Equal(at(9)) || len(p.over[0].slots) != 3 {
		t.Fatalf("key a: max %d, over %d %+v; want 3 slots held at 9ms, once", p.max, p.overN, p.over)
	}
	// Zero-length slots (a claim ended at its own instant) hold nothing.
	if ps := peaks([]slot{sl("c", 5, 5), sl("c", 5, 5), sl("c", 5, 5)}, 1, limitOf); ps["c"] != nil {
		t.Errorf("zero-length slots counted: %+v", ps["c"])
	}
}

// A successor's slot is its claim's span less its predecessor's spans under the
// recorded token: nothing while the predecessor holds the slot, the rest after it,
// and the gap of a predecessor's lease that expired and was extended.
func TestHandedOver(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pred := []slot{
		{job: "p", token: "t1", from: at(0), to: at(10)},
		{job: "p", token: "t1", from: at(14), to: at(20)}, // extended after expiring at 10
		{job: "p", token: "t0", from: at(30), to: at(40)}, // another claim of p: no bearing
	}
	succ := slot{job: "s", token: "u", from: at(5), to: at(50), predJob: "p", predToken: "t1"}
	got := handedOver(append(pred, succ))
	var spans [][2]int
	for _, s := range got {
		if s.job == "s" {
			spans = append(spans, [2]int{int(s.from.Sub(t0) / time.Millisecond), int(s.to.Sub(t0) / time.Millisecond)})
		}
	}
	if len(spans) != 2 || spans[0] != [2]int{10, 14} || spans[1] != [2]int{20, 50} {
		t.Errorf("successor holds %v, want [[10 14] [20 50]]", spans)
	}
	if len(got) != 5 {
		t.Errorf("%d slots out of 4 in, want 5 (the predecessor's three, the successor's two)", len(got))
	}
	ps := peaks(got, 1, func(string) int { return 1 })
	// Only at 30 ms, where another claim of p begins, do two slots overlap.
	if p := ps[""]; p.overN != 1 || p.max != 2 || !p.over[0].at.Equal(at(30)) {
		t.Errorf("queue: max %d, %d instants over 1 (%+v); want 2, once, at 30 ms", p.max, p.overN, p.over)
	}
}

// The ends one transaction writes are replayed together, at its latest row: a chain
// p → s1 → s2 of handed-over slots whose outcomes of p and s1 commit in one batch,
// s1's row first (the completer writes in id order), holds one slot throughout. The
// same ends in two transactions leave a moment where p and s2 both hold one, as a
// claim between the two commits would count them.
func TestReplaySlotsEndsOfOneTransactionTogether(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }
	ptr := func(us int) *time.Time { v := at(us); return &v }
	lease := ptr(2_000_000)
	chain := func(pEnd, s1End int64) []transition {
		claim := func(job, token, pred, predToken string, us int) transition {
			return transition{job: job, key: "k", oldStatus: "pending", newStatus: "running", token: token, claimedAt: ptr(us), at: at(us + 50),
				xact: int64(us), predJob: pred, predToken: predToken, jobStatus: "succeeded"}
		}
		end := func(job, token string, us int, xact int64) transition {
			return transition{job: job, key: "k", oldStatus: "running", newStatus: "succeeded", oldLease: lease, at: at(us), xact: xact, jobStatus: "succeeded"}
		}
		return []transition{
			claim("p", "tp", "", "", 0), end("p", "tp", 100_060, pEnd),
			claim("s1", "t1", "p", "tp", 10), end("s1", "t1", 100_000, s1End),
			claim("s2", "t2", "s1", "t1", 20), end("s2", "t2", 150_000, 7),
		}
	}
	limitOne := func(string) int { return 1 }

	slots, claims, _ := replaySlots(chain(5, 5), at(1_000_000))
	if claims != 3 {
		t.Fatalf("%d claims replayed, want 3", claims)
	}
	if p := peaks(slots, 1, limitOne)["k"]; p == nil || p.max != 1 {
		t.Errorf("one transaction: %+v; want the chain to hold one slot at a time", p)
	}
	slots, _, _ = replaySlots(chain(5, 6), at(1_000_000))
	if p := peaks(slots, 1, limitOne)["k"]; p == nil || p.max != 2 || !p.over[0].at.Equal(at(100_000)) {
		t.Errorf("two transactions: %+v; want p and s2 both held from s1's end at 100ms", p)
	}
}
