package dashboard

// The fair queues page (docs/fairness.md): each fair queue's setting, its keys with
// the most due jobs and the age of each one's oldest due job, and its weights.

import (
	"errors"
	"net/http"
	"time"

	"github.com/skiplock/skiplock"
)

// fairTop is how many keys the page shows per fair queue.
const fairTop = 20

type fairKeyRow struct {
	skiplock.FairKeyStats
	Weight int
}

type fairQueueRow struct {
	Queue          string
	BypassPriority *int
	Keys           []fairKeyRow
	KeyCount       int
	Weights        []skiplock.FairWeight
}

type fairData struct {
	Queues []fairQueueRow
	Top    int
}

func (h *handler) fair(q *request) {
	qs, err := h.c.QueueList(q.ctx)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d := fairData{Top: fairTop}
	for _, qi := range qs {
		if !qi.Fair {
			continue
		}
		keys, err := h.c.FairKeys(q.ctx, qi.Name, &skiplock.FairKeysOpts{Top: fairTop})
		if err != nil && !errors.Is(err, skiplock.ErrNotOnCitus) { // the Citus layout: the queue without its keys
			h.failErr(q, err)
			return
		}
		weights, err := h.c.FairWeights(q.ctx, qi.Name)
		if err != nil {
			h.failErr(q, err)
			return
		}
		byKey := map[string]int{}
		for _, w := range weights {
			byKey[w.Key] = w.Weight
		}
		row := fairQueueRow{Queue: qi.Name, BypassPriority: qi.FairBypassPriority, Weights: weights}
		for _, k := range keys {
			w := 1
			if v, ok := byKey[k.Key]; ok && !k.Other {
				w = v
			}
			row.Keys = append(row.Keys, fairKeyRow{FairKeyStats: k, Weight: w})
			row.KeyCount += k.Keys
		}
		d.Queues = append(d.Queues, row)
	}
	h.render(q, http.StatusOK, "fair", "Fair queues", "fair", d)
}

// ageOf is the template's rendering of a due job's age (–: none due).
func ageOf(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return formatDuration(d.Round(time.Millisecond))
}
