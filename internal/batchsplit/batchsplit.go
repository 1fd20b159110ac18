// Package batchsplit writes a batch of outcomes with one statement and, when the
// database refuses that statement for a reason retrying cannot fix (a constraint or a
// trigger that rejects one row, an unstorable text), isolates the refused items by
// halving, so that every other item is still written. A single refused item is
// written once more as its fallback (a plain text in place of the caller's); if that
// is refused too it is given up. A statement budget bounds the work, so a refusal
// that every row hits costs a few dozen statements, not two per item.
//
// The completer (job outcomes) and the outbox relay (event outcomes) both write
// their batches through it.
package batchsplit

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
)

// ErrBudgetSpent is what GiveUp is told for the items left when the batch's
// statement budget is spent.
var ErrBudgetSpent = errors.New("too many refused statements in this batch; not split further")

// Budget is the statements a batch of n items may take: 8*bits.Len(n)+8. Halving
// down to one item costs about 2*log2(n) statements per refused item, so this
// isolates a few refused items and stops when nearly all of them are refused.
func Budget(n int) int { return 8*bits.Len(uint(n)) + 8 }

// Splitter writes batches of T. Write and GiveUp are required.
type Splitter[T any] struct {
	// Write writes items with one statement (it may retry internally what retrying
	// can fix). nil: written. An error for which Refused is true: refused, to be
	// split. Any other error stops the batch: Run returns it, and the items not yet
	// written are neither written nor given up (the caller owns them).
	Write func(items []T) error
	// Refused reports whether err is a refusal that splitting can isolate. Nil
	// means every error Write returns is one.
	Refused func(err error) bool
	// Fallback returns what to write in place of one refused item and true, or false
	// when the item has nothing to replace (it is given up at once). Nil: no item has
	// a fallback.
	Fallback func(item T, refusal error) (T, bool)
	// GiveUp is told of items left unwritten: one item refused (as its fallback too,
	// if it had one), with the refusal; or the items left when the budget is spent,
	// with ErrBudgetSpent.
	GiveUp func(items []T, err error)
	// Log receives a Warn line for each fallback written and an Error line for each
	// give-up. Default: discarded.
	Log *slog.Logger
	// Name prefixes the log lines ("skiplock", "outbox relay").
	Name string
	// Attrs describes one item in the log lines (its id, its action). Optional.
	Attrs func(item T) []any
}

// Run writes items within Budget(len(items)) statements, splitting refusals. It
// returns nil when every item was written or given up, else the first error Write
// returned that is not a refusal.
func (s Splitter[T]) Run(items []T) error {
	if len(items) == 0 {
		return nil
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	budget := Budget(len(items))
	return s.split(items, &budget)
}

func (s Splitter[T]) refused(err error) bool { return s.Refused == nil || s.Refused(err) }

// write runs one statement within the budget; spent reports that it ran none and
// gave the items up instead.
func (s Splitter[T]) write(items []T, budget *int) (spent bool, err error) {
	if *budget <= 0 {
		s.Log.Error(s.Name+": the database keeps refusing this batch; giving up on the rest", "items", len(items))
		s.GiveUp(items, ErrBudgetSpent)
		return true, nil
	}
	*budget--
	return false, s.Write(items)
}

func (s Splitter[T]) split(items []T, budget *int) error {
	spent, err := s.write(items, budget)
	if spent || err == nil {
		return nil
	}
	if !s.refused(err) {
		return err
	}
	if len(items) > 1 {
		half := len(items) / 2
		if err := s.split(items[:half], budget); err != nil {
			return err
		}
		return s.split(items[half:], budget)
	}
	item := items[0]
	if s.Fallback != nil {
		if fb, ok := s.Fallback(item, err); ok {
			s.Log.Warn(s.Name+": the database refused an outcome; writing its fallback",
				append(s.attrs(item), "error", err)...)
			spent, ferr := s.write([]T{fb}, budget)
			if spent || ferr == nil {
				return nil
			}
			if !s.refused(ferr) {
				return ferr
			}
			err = fmt.Errorf("%w (and its fallback: %w)", err, ferr)
		}
	}
	s.Log.Error(s.Name+": the database refused an outcome; giving it up", append(s.attrs(item), "error", err)...)
	s.GiveUp(items, err)
	return nil
}

func (s Splitter[T]) attrs(item T) []any {
	if s.Attrs == nil {
		return nil
	}
	return s.Attrs(item)
}
