package dashboard

// The batches, flows and limits pages, and the limit actions.

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
)

// --- batches ---

type batchRow struct {
	*skiplock.BatchInfo
	OnCompleteURL, OnFailureURL string
	CreatedAgo                  string
}

type batchesData struct {
	Batches  []batchRow
	Open     bool
	OpenURL  string // the other filter: open only, or all
	NextURL  string
	FirstURL string
}

func (h *handler) batches(q *request) {
	v := q.r.URL.Query()
	d := batchesData{Open: v.Get("open") == "1"}
	base := url.Values{}
	if d.Open {
		base.Set("open", "1")
		d.OpenURL = q.prefix + "/batches"
	} else {
		d.OpenURL = q.prefix + "/batches?open=1"
	}
	before := v.Get("after") // newest first: the page after is the older one
	list, err := h.c.BatchList(q.ctx, skiplock.BatchListParams{Open: d.Open, BeforeID: before, Limit: h.opts.PageSize + 1})
	if err != nil {
		h.failErr(q, err)
		return
	}
	if len(list) > h.opts.PageSize {
		list = list[:h.opts.PageSize]
		d.NextURL = q.prefix + "/batches?" + with(base, "after", list[len(list)-1].ID).Encode()
	}
	if before != "" {
		d.FirstURL = q.prefix + "/batches"
		if d.Open {
			d.FirstURL += "?open=1"
		}
	}
	now := h.now()
	for _, b := range list {
		r := batchRow{BatchInfo: b, CreatedAgo: relative(now, b.CreatedAt)}
		if b.OnComplete != "" {
			r.OnCompleteURL = q.prefix + "/jobs/" + b.OnComplete
		}
		if b.OnFailure != "" {
			r.OnFailureURL = q.prefix + "/jobs/" + b.OnFailure
		}
		d.Batches = append(d.Batches, r)
	}
	h.render(q, http.StatusOK, "batches", "Batches", "batches", d)
}

// --- flows ---

type flowsData struct {
	Jobs     []jobRow
	NextURL  string
	PrevURL  string
	FirstURL string
	Bounded  bool
}

// flows lists the jobs waiting on others, newest first: flow parents waiting for
// their children and batch callbacks not released yet. Each links to its job page,
// which draws its flow's tree.
func (h *handler) flows(q *request) {
	v := q.r.URL.Query()
	p := skiplock.PageParams{ListParams: skiplock.ListParams{States: []skiplock.JobState{skiplock.StateWaiting},
		AfterID: v.Get("after"), Limit: h.opts.PageSize}, NewestFirst: true, BeforeID: v.Get("before")}
	page, err := h.c.JobPage(q.ctx, p)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d := flowsData{Bounded: page.Bounded}
	if page.Next != "" {
		d.NextURL = q.prefix + "/flows?" + url.Values{"after": {page.Next}}.Encode()
	}
	if page.Prev != "" {
		d.PrevURL = q.prefix + "/flows?" + url.Values{"before": {page.Prev}}.Encode()
	}
	if p.AfterID != "" || p.BeforeID != "" {
		d.FirstURL = q.prefix + "/flows"
	}
	now := h.now()
	for _, j := range page.Jobs {
		d.Jobs = append(d.Jobs, newJobRow(q, j, now, false))
	}
	h.render(q, http.StatusOK, "flows", "Flows", "flows", d)
}

// --- limits ---

type limitRow struct {
	skiplock.Limit
	Usage []skiplock.LimitUsage
}

type limitsData struct {
	Limits  []limitRow
	EachKey string
}

func (h *handler) limits(q *request) {
	list, err := h.c.LimitList(q.ctx)
	if err != nil {
		h.failErr(q, err)
		return
	}
	usage, err := h.c.LimitUsages(q.ctx)
	if err != nil && !errors.Is(err, skiplock.ErrNotOnCitus) { // the Citus layout: the limits without their use
		h.failErr(q, err)
		return
	}
	d := limitsData{EachKey: skiplock.EachKey}
	for _, l := range list {
		r := limitRow{Limit: l}
		for _, u := range usage {
			if u.Limit.Queue == l.Queue && u.Limit.Kind == l.Kind && u.Limit.Key == l.Key {
				r.Usage = append(r.Usage, u)
			}
		}
		d.Limits = append(d.Limits, r)
	}
	h.render(q, http.StatusOK, "limits", "Limits", "limits", d)
}

// limitAct sets or deletes a limit: POST /limits/{set|delete}, fields scope ("queue"
// or "kind"), name, key, and for set max_running, rate and per (a Go duration).
func (h *handler) limitAct(q *request, verb string) {
	f := q.r.PostForm
	var l skiplock.Limit
	name := strings.TrimSpace(f.Get("name"))
	switch f.Get("scope") {
	case "queue":
		l.Queue = name
	case "kind":
		l.Kind = name
	default:
		h.fail(q, http.StatusBadRequest, "A limit governs a queue or a kind (scope).")
		return
	}
	l.Key = strings.TrimSpace(f.Get("key"))
	switch verb {
	case "set":
		if h.refuse(q, ActionLimitSet) {
			return
		}
		var err error
		if l.MaxRunning, err = formInt(f, "max_running"); err == nil {
			l.Rate, err = formInt(f, "rate")
		}
		if s := strings.TrimSpace(f.Get("per")); err == nil && s != "" {
			l.Per, err = time.ParseDuration(s)
		}
		if err != nil {
			h.fail(q, http.StatusBadRequest, "Max running and rate are whole numbers, per a duration such as 1m or 500ms.")
			return
		}
		if err := h.c.LimitSet(q.ctx, l); err != nil {
			h.failErr(q, err)
			return
		}
	case "delete":
		if h.refuse(q, ActionLimitDelete) {
			return
		}
		if _, err := h.c.LimitDelete(q.ctx, l); err != nil {
			h.failErr(q, err)
			return
		}
	default:
		h.fail(q, http.StatusNotFound, "No such action.")
		return
	}
	h.redirect(q, q.prefix+"/limits?"+url.Values{"done": {verb}, "what": {"limit"}}.Encode())
}

// formInt reads a whole number from a form field; empty is 0.
func formInt(f url.Values, name string) (int, error) {
	s := strings.TrimSpace(f.Get(name))
	if s == "" {
		return 0, nil
	}
	return strconv.Atoi(s)
}
