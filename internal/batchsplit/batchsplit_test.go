package batchsplit_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/batchsplit"
)

// item is a test outcome: an id and the text the database may refuse.
type item struct {
	id       int
	fallback bool // written as its fallback
}

var (
	errRefused   = errors.New("refused: check constraint")
	errRetryable = errors.New("connection reset")
)

// db is a fake database: it refuses any statement that holds a poisoned id (its
// fallback too, when poisonFallback holds the id), and fails with errRetryable on the
// statement numbered failAt (1-based).
type db struct {
	poison, poisonFallback map[int]bool
	failAt                 int
	statements             int
	written                map[int]int // id → times written
	fellBack               map[int]bool
	gaveUp                 map[int]error
	log                    bytes.Buffer
}

func newDB(poison ...int) *db {
	d := &db{poison: map[int]bool{}, poisonFallback: map[int]bool{}, written: map[int]int{}, fellBack: map[int]bool{},
		gaveUp: map[int]error{}}
	for _, id := range poison {
		d.poison[id] = true
	}
	return d
}

func (d *db) splitter() batchsplit.Splitter[item] {
	return batchsplit.Splitter[item]{
		Write: func(items []item) error {
			d.statements++
			if d.statements == d.failAt {
				return errRetryable
			}
			for _, it := range items {
				if (!it.fallback && d.poison[it.id]) || (it.fallback && d.poisonFallback[it.id]) {
					return fmt.Errorf("row %d: %w", it.id, errRefused)
				}
			}
			for _, it := range items {
				d.written[it.id]++
				if it.fallback {
					d.fellBack[it.id] = true
				}
			}
			return nil
		},
		Refused: func(err error) bool { return errors.Is(err, errRefused) },
		Fallback: func(it item, _ error) (item, bool) {
			it.fallback = true
			return it, it.id%10 != 9 // ids ending in 9 have nothing to fall back to
		},
		GiveUp: func(items []item, err error) {
			for _, it := range items {
				if _, dup := d.gaveUp[it.id]; dup {
					panic(fmt.Sprintf("item %d given up twice", it.id))
				}
				d.gaveUp[it.id] = err
			}
		},
		Log:   slog.New(slog.NewTextHandler(&d.log, nil)),
		Name:  "test",
		Attrs: func(it item) []any { return []any{"item_id", it.id} },
	}
}

func batch(n int) []item {
	out := make([]item, n)
	for i := range out {
		out[i] = item{id: i}
	}
	return out
}

// accounted checks that every item of n was written exactly once or given up, never
// both, and returns how many were given up.
func (d *db) accounted(t *testing.T, n int) int {
	t.Helper()
	gave := 0
	for id := range n {
		w, g := d.written[id], d.gaveUp[id] != nil
		switch {
		case w > 1:
			t.Errorf("item %d written %d times", id, w)
		case w == 1 && g:
			t.Errorf("item %d written and given up", id)
		case w == 0 && !g:
			t.Errorf("item %d neither written nor given up", id)
		}
		if g {
			gave++
		}
	}
	return gave
}

func TestBudget(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{0: 8, 1: 16, 2: 24, 3: 24, 100: 64, 1000: 88, 10000: 120} {
		if got := batchsplit.Budget(n); got != want {
			t.Errorf("Budget(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestCleanBatchIsOneStatement(t *testing.T) {
	t.Parallel()
	d := newDB()
	if err := d.splitter().Run(batch(100)); err != nil {
		t.Fatal(err)
	}
	if d.statements != 1 || d.accounted(t, 100) != 0 || len(d.fellBack) != 0 {
		t.Fatalf("%d statements, %d fallbacks", d.statements, len(d.fellBack))
	}
	if d.log.Len() != 0 {
		t.Errorf("a clean batch logged:\n%s", d.log.String())
	}
}

func TestEmptyBatchWritesNothing(t *testing.T) {
	t.Parallel()
	d := newDB()
	if err := d.splitter().Run(nil); err != nil || d.statements != 0 {
		t.Fatalf("err %v, %d statements", err, d.statements)
	}
}

// One refused item among 64: every other item is written, the refused one as its
// fallback, in 2*log2(64)+2 statements (the refusal at each of 7 levels, the clean
// halves beside it, and the fallback).
func TestOnePoisonIsIsolatedAndFallsBack(t *testing.T) {
	t.Parallel()
	d := newDB(37)
	if err := d.splitter().Run(batch(64)); err != nil {
		t.Fatal(err)
	}
	if gave := d.accounted(t, 64); gave != 0 {
		t.Fatalf("%d given up: %v", gave, d.gaveUp)
	}
	if len(d.fellBack) != 1 || !d.fellBack[37] {
		t.Fatalf("fallbacks: %v", d.fellBack)
	}
	if want := 2*6 + 1 + 1; d.statements != want {
		t.Errorf("%d statements, want %d", d.statements, want)
	}
	if !strings.Contains(d.log.String(), "test: the database refused an outcome; writing its fallback") ||
		!strings.Contains(d.log.String(), "item_id=37") {
		t.Errorf("the fallback was not logged with the item's attrs:\n%s", d.log.String())
	}
}

// A refused item whose fallback is refused too is given up, with both refusals; an
// item without a fallback is given up without a second statement for it.
func TestRefusedFallbackAndNoFallbackAreGivenUp(t *testing.T) {
	t.Parallel()
	d := newDB(3, 9)
	d.poisonFallback[3] = true
	if err := d.splitter().Run(batch(16)); err != nil {
		t.Fatal(err)
	}
	if gave := d.accounted(t, 16); gave != 2 {
		t.Fatalf("%d given up, want 2: %v", gave, d.gaveUp)
	}
	if err := d.gaveUp[3]; !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "its fallback") {
		t.Errorf("item 3 given up with %v, want both refusals", err)
	}
	if err := d.gaveUp[9]; !errors.Is(err, errRefused) || strings.Contains(err.Error(), "fallback") {
		t.Errorf("item 9 given up with %v, want its own refusal only", err)
	}
	if len(d.fellBack) != 0 {
		t.Errorf("fallbacks written: %v", d.fellBack)
	}
	// 16 → halves down to 3 and to 9: 1 + 2*4 statements for each path, less the
	// shared top, plus one fallback attempt for 3.
	if want := 1 + 2*4 + 2*3 + 1; d.statements != want {
		t.Errorf("%d statements, want %d", d.statements, want)
	}
	if n := strings.Count(d.log.String(), "giving it up"); n != 2 {
		t.Errorf("%d give-up lines, want 2:\n%s", n, d.log.String())
	}
}

// A refusal every item hits costs the budget, not two statements per item, and every
// item is still given up exactly once.
func TestEveryItemRefusedStopsAtTheBudget(t *testing.T) {
	t.Parallel()
	const n = 1000
	d := newDB()
	for id := range n {
		d.poison[id] = true
		d.poisonFallback[id] = true
	}
	if err := d.splitter().Run(batch(n)); err != nil {
		t.Fatal(err)
	}
	if d.statements != batchsplit.Budget(n) {
		t.Errorf("%d statements, want the budget %d", d.statements, batchsplit.Budget(n))
	}
	if gave := d.accounted(t, n); gave != n {
		t.Fatalf("%d given up, want %d", gave, n)
	}
	spent := 0
	for _, err := range d.gaveUp {
		if errors.Is(err, batchsplit.ErrBudgetSpent) {
			spent++
		}
	}
	if spent == 0 || spent == n {
		t.Errorf("%d of %d given up for the budget; want most but not all", spent, n)
	}
}

// An error that is not a refusal stops the batch: Run returns it, and the items after
// it are neither written nor given up.
func TestRetryableErrorStopsTheBatch(t *testing.T) {
	t.Parallel()
	d := newDB(0)
	d.failAt = 3 // 1: the batch, refused; 2: items[:4], refused; 3: items[:2]
	err := d.splitter().Run(batch(8))
	if !errors.Is(err, errRetryable) {
		t.Fatalf("Run: %v, want the retryable error", err)
	}
	if d.statements != 3 || len(d.written) != 0 || len(d.gaveUp) != 0 {
		t.Fatalf("%d statements, written %v, given up %v", d.statements, d.written, d.gaveUp)
	}
}

// A retryable error on the fallback's statement is returned too.
func TestRetryableErrorOnTheFallback(t *testing.T) {
	t.Parallel()
	d := newDB(0)
	d.failAt = 2 // 1: the one item, refused; 2: its fallback
	if err := d.splitter().Run(batch(1)); !errors.Is(err, errRetryable) {
		t.Fatalf("Run: %v, want the retryable error", err)
	}
	if len(d.gaveUp) != 0 || len(d.written) != 0 {
		t.Fatalf("written %v, given up %v", d.written, d.gaveUp)
	}
}

// Without Refused every error is a refusal; without Fallback a refused item is given
// up at once; without Log nothing panics.
func TestMinimalSplitter(t *testing.T) {
	t.Parallel()
	var written, gaveUp []int
	s := batchsplit.Splitter[int]{
		Write: func(items []int) error {
			for _, v := range items {
				if v == 2 {
					return errRetryable
				}
			}
			written = append(written, items...)
			return nil
		},
		GiveUp: func(items []int, _ error) { gaveUp = append(gaveUp, items...) },
	}
	if err := s.Run([]int{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(written) != "[0 1 3]" || fmt.Sprint(gaveUp) != "[2]" {
		t.Fatalf("written %v, given up %v", written, gaveUp)
	}
}

// Random poison sets: every item is accounted for exactly once, and a batch never
// takes more statements than its budget.
func TestRandomPoisonAccountsForEveryItem(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(300)
		d := newDB()
		for range rng.IntN(6) {
			id := rng.IntN(n)
			d.poison[id] = true
			if rng.IntN(2) == 0 {
				d.poisonFallback[id] = true
			}
		}
		if err := d.splitter().Run(batch(n)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		d.accounted(t, n)
		if d.statements > batchsplit.Budget(n) {
			t.Fatalf("round %d: %d statements over the budget %d", round, d.statements, batchsplit.Budget(n))
		}
		for id := range d.poison {
			if d.written[id] == 1 && !d.fellBack[id] {
				t.Fatalf("round %d: poisoned item %d written as itself", round, id)
			}
		}
	}
}
