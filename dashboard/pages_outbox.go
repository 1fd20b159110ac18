package dashboard

// The outbox pages (pending, dead and published lists; one event) and the lineage page.
import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/uuidv7"
	"github.com/skiplock/skiplock/outbox"
)

type eventRow struct {
	*outbox.Record
	URL   string
	State outbox.State
	// CreatedAgo and EndedAgo (published or dead) are relative to now; the template
	// shows the UTC time on hover.
	CreatedAgo, EndedAgo string
}

// newEventRow prepares an event for the "eventtable" template.
func newEventRow(q *request, r *outbox.Record, now time.Time) eventRow {
	row := eventRow{Record: r, URL: q.prefix + "/outbox/" + r.ID, State: eventState(r), CreatedAgo: relative(now, r.CreatedAt)}
	if t := cmp.Or(r.PublishedAt, r.DeadAt); t != nil {
		row.EndedAgo = relative(now, *t)
	}
	return row
}

func eventState(r *outbox.Record) outbox.State {
	switch {
	case r.PublishedAt != nil:
		return outbox.StatePublished
	case r.DeadAt != nil:
		return outbox.StateDead
	}
	return outbox.StatePending
}

type outboxTab struct {
	State  outbox.State
	URL    string
	Active bool
}

type outboxData struct {
	State   outbox.State
	Tabs    []outboxTab
	Events  []eventRow
	Stats   skiplock.OutboxStats
	NextURL string
	First   string
	// RequeueDeadURL is the confirmation page of requeueing every dead event, when allowed.
	RequeueDeadURL string
}

func (h *handler) outboxList(q *request) {
	v := q.r.URL.Query()
	state := outbox.State(cmp.Or(v.Get("state"), string(outbox.StatePending)))
	if !slices.Contains(outbox.States, state) {
		h.fail(q, http.StatusBadRequest, "Unknown outbox state "+strconv.Quote(string(state))+": pending, dead or published.")
		return
	}
	d := outboxData{State: state}
	for _, s := range outbox.States {
		d.Tabs = append(d.Tabs, outboxTab{State: s, URL: q.prefix + "/outbox?state=" + string(s), Active: s == state})
	}
	s, err := h.c.Stats(q.ctx, &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
	if err != nil {
		h.failErr(q, err)
		return
	}
	d.Stats = s.Outbox
	admin, db := h.ob.Admin(), h.c.Pool()
	var after *outbox.Record
	if id := v.Get("after"); id != "" {
		if !uuidv7.Valid(id) {
			h.fail(q, http.StatusBadRequest, badAfter)
			return
		}
		if after, err = admin.Get(q.ctx, db, id); err != nil {
			if errors.Is(err, outbox.ErrNotFound) {
				h.fail(q, http.StatusBadRequest, "The event this page continued after is gone; start from the first page.")
				return
			}
			h.failErr(q, err)
			return
		}
		d.First = q.prefix + "/outbox?state=" + string(state)
	}
	list, err := admin.List(q.ctx, db, state, after, h.opts.PageSize+1)
	if err != nil {
		h.failErr(q, err)
		return
	}
	if len(list) > h.opts.PageSize {
		list = list[:h.opts.PageSize]
		d.NextURL = q.prefix + "/outbox?" + url.Values{"state": {string(state)}, "after": {list[len(list)-1].ID}}.Encode()
	}
	now := h.now()
	for _, r := range list {
		d.Events = append(d.Events, newEventRow(q, r, now))
	}
	if state == outbox.StateDead && len(list) > 0 && h.can(q.r, ActionOutboxRequeueDead) {
		d.RequeueDeadURL = q.prefix + "/outbox/requeue-dead"
	}
	h.render(q, http.StatusOK, "outbox", "Outbox", "outbox", d)
}

type eventData struct {
	Event      *outbox.Record
	State      outbox.State
	LineageURL string
	Payload    string
	Headers    []metaPair
	Redacted   bool
}

func (h *handler) event(q *request, id string) {
	r, err := h.ob.Admin().Get(q.ctx, h.c.Pool(), id)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d := eventData{Event: r, State: eventState(r)}
	if r.TxID != 0 {
		d.LineageURL = q.prefix + "/tx/" + strconv.FormatInt(r.TxID, 10)
	}
	if h.showPayloads(q.r) {
		d.Payload = pretty(r.Payload)
		for k, v := range r.Headers {
			d.Headers = append(d.Headers, metaPair{k, v})
		}
		slices.SortFunc(d.Headers, func(a, b metaPair) int { return cmp.Compare(a.Key, b.Key) })
	} else {
		d.Redacted = true
	}
	h.render(q, http.StatusOK, "event", "Event "+r.ID, "outbox", d)
}

// --- lineage ---

// badAfter is the answer (400, on every page) to a page cursor that is not an id.
const badAfter = "The page cursor (after=) is not an id of this list; start from the first page."

type lineageData struct {
	TxID     int64
	Jobs     []jobRow
	Events   []eventRow
	Outbox   bool
	NextURL  string // the next page of jobs
	FirstURL string
}

func (h *handler) lineage(q *request, s string) {
	txid, err := strconv.ParseInt(s, 10, 64)
	if err != nil || txid <= 0 {
		h.fail(q, http.StatusBadRequest, "A transaction id is a positive number.")
		return
	}
	d := lineageData{TxID: txid, Outbox: h.ob != nil}
	after := q.r.URL.Query().Get("after")
	if after != "" && !uuidv7.Valid(after) {
		h.fail(q, http.StatusBadRequest, badAfter)
		return
	}
	jobs, err := h.c.JobsByTxPage(q.ctx, txid, after, h.opts.PageSize+1)
	if err != nil {
		h.failErr(q, err)
		return
	}
	base := q.prefix + "/tx/" + strconv.FormatInt(txid, 10)
	if len(jobs) > h.opts.PageSize {
		jobs = jobs[:h.opts.PageSize]
		d.NextURL = base + "?" + url.Values{"after": {jobs[len(jobs)-1].ID}}.Encode()
	}
	if after != "" {
		d.FirstURL = base
	}
	if job := q.r.URL.Query().Get("job"); job != "" && after == "" && len(jobs) == 0 {
		// A transaction that wrote one job and nothing else (Client.Enqueue) records
		// no lineage (migration 0020): its lineage is that job, named by the job's
		// page. Shown only when it really was written by txid.
		if !uuidv7.Valid(job) {
			h.fail(q, http.StatusBadRequest, "A job id is a UUID.")
			return
		}
		j, err := h.c.JobGet(q.ctx, job)
		switch {
		case errors.Is(err, skiplock.ErrNotFound):
		case err != nil:
			h.failErr(q, err)
			return
		case j.TxID == txid:
			jobs = []*skiplock.Job{j}
		}
	}
	now := h.now()
	for _, j := range jobs {
		d.Jobs = append(d.Jobs, newJobRow(q, j, now, false))
	}
	if h.ob != nil && after == "" {
		evs, err := h.ob.Admin().EventsByTx(q.ctx, h.c.Pool(), txid)
		if err != nil {
			h.failErr(q, err)
			return
		}
		for _, r := range evs {
			d.Events = append(d.Events, newEventRow(q, r, now))
		}
	}
	h.render(q, http.StatusOK, "lineage", "Transaction "+s, "jobs", d)
}
