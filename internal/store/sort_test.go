package store

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// claimOrdered returns jobs in claim order (priority DESC, run_at, id): per priority
// and per run_at several ids, so every key decides somewhere.
func claimOrdered(priorities, runAts, ids int) []*Job {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []*Job
	for p := priorities - 1; p >= 0; p-- {
		for r := range runAts {
			for id := range ids {
				out = append(out, &Job{ID: fmt.Sprintf("01900000-0000-7000-8000-%012d", id), Priority: p,
					RunAt: t0.Add(time.Duration(r) * time.Second)})
			}
		}
	}
	return out
}

func TestSortClaimOrder(t *testing.T) {
	t.Parallel()
	for _, shape := range [][3]int{{0, 0, 0}, {1, 1, 1}, {1, 1, 2}, {2, 1, 1}, {1, 2, 1}, {4, 5, 7}} {
		want := claimOrdered(shape[0], shape[1], shape[2])
		for round := range 5 {
			got := slices.Clone(want)
			switch round {
			case 0: // already in order: the usual case
			case 1:
				slices.Reverse(got)
			default:
				rand.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
			}
			SortClaimOrder(got)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v round %d: position %d holds %+v, want %+v", shape, round, i, *got[i], *want[i])
				}
			}
		}
	}
}

func TestOutboxClaimOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var want []*OutboxEvent
	for i := range 60 {
		want = append(want, &OutboxEvent{ID: fmt.Sprintf("id-%02d", i%10), CreatedAt: t0.Add(time.Duration(i/10) * time.Millisecond)})
	}
	got := slices.Clone(want)
	rand.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
	sortBatch(got, outboxClaimOrder)
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("position %d holds %+v, want %+v", i, *got[i], *want[i])
		}
	}
}

// BenchmarkSortClaimOrder measures the claim batch sort (see sortBatch) on a batch
// already in order and on one with mixed priorities in id order.
func BenchmarkSortClaimOrder(b *testing.B) {
	t0 := time.Now()
	for _, shape := range []string{"sorted", "mixed"} {
		src := make([]*Job, 1000)
		for i := range src {
			src[i] = &Job{ID: fmt.Sprintf("01900000-0000-7000-8000-%012d", i), RunAt: t0.Add(time.Duration(i) * time.Microsecond)}
			if shape == "mixed" {
				src[i].Priority = i * 7 % 4
			}
		}
		buf := make([]*Job, len(src))
		b.Run(shape, func(b *testing.B) {
			for b.Loop() {
				copy(buf, src)
				SortClaimOrder(buf)
			}
		})
	}
}
