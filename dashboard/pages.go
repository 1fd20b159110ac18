package dashboard

import (
	"cmp"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
)

// route sends a request to its page or action. Paths are matched here rather than by
// an http.ServeMux, whose redirects (cleaning a path, adding a slash) would not know
// the prefix the dashboard is served under.
func (h *handler) route(q *request) {
	seg := strings.Split(strings.Trim(q.path, "/"), "/")
	get := q.r.Method != http.MethodPost
	switch {
	case q.path == "/" && get:
		h.overview(q)
	case seg[0] == "jobs" && len(seg) == 1 && get:
		h.jobs(q)
	case seg[0] == "jobs" && len(seg) == 2 && seg[1] == "bulk":
		h.bulk(q)
	case seg[0] == "jobs" && len(seg) == 2 && get:
		h.job(q, seg[1])
	case seg[0] == "jobs" && len(seg) == 3 && !get:
		h.jobAct(q, seg[1], seg[2])
	case seg[0] == "queues" && len(seg) == 1 && get:
		h.queues(q)
	case seg[0] == "queues" && len(seg) == 2 && !get:
		h.queueAct(q, seg[1])
	case seg[0] == "schedules" && len(seg) == 1 && get:
		h.schedules(q)
	case seg[0] == "schedules" && len(seg) == 2 && !get:
		h.scheduleAct(q, seg[1])
	case seg[0] == "outbox" && h.ob == nil:
		h.fail(q, http.StatusNotFound, "This dashboard shows no outbox.")
	case seg[0] == "outbox" && len(seg) == 1 && get:
		h.outboxList(q)
	case seg[0] == "outbox" && len(seg) == 2 && seg[1] == "requeue-dead":
		h.requeueDead(q)
	case seg[0] == "outbox" && len(seg) == 2 && get:
		h.event(q, seg[1])
	case seg[0] == "outbox" && len(seg) == 3 && seg[2] == "requeue" && !get:
		h.eventRequeue(q, seg[1])
	case seg[0] == "batches" && len(seg) == 1 && get:
		h.batches(q)
	case seg[0] == "flows" && len(seg) == 1 && get:
		h.flows(q)
	case seg[0] == "limits" && len(seg) == 1 && get:
		h.limits(q)
	case seg[0] == "limits" && len(seg) == 2 && !get:
		h.limitAct(q, seg[1])
	case seg[0] == "fair" && len(seg) == 1 && get:
		h.fair(q)
	case seg[0] == "tx" && len(seg) == 2 && get:
		h.lineage(q, seg[1])
	case q.path == "/logout" && !get:
		h.logout(q)
	default:
		if !get && len(seg) > 0 && slices.Contains([]string{"", "jobs", "queues", "schedules", "outbox", "tx", "batches", "flows", "limits", "fair"}, seg[0]) && len(seg) <= 1 {
			q.w.Header().Set("Allow", "GET, HEAD")
			h.fail(q, http.StatusMethodNotAllowed, "This page takes no POST.")
			return
		}
		h.fail(q, http.StatusNotFound, "No such page.")
	}
}

// refuse answers 403 unless the viewer may perform action.
func (h *handler) refuse(q *request, action string) bool {
	if h.can(q.r, action) {
		return false
	}
	h.fail(q, http.StatusForbidden, "You are not allowed to do this ("+action+").")
	return true
}

// --- overview ---

const (
	chartWindow = time.Hour
	chartBucket = 5 * time.Minute
)

type queueRow struct {
	skiplock.QueueStats
	PausedAt  time.Time
	Sparkline template.HTML
}

type overviewData struct {
	Queues      []queueRow
	Recent      skiplock.RecentStats
	Estimated   bool
	Throughput  template.HTML
	Failures    template.HTML
	Outbox      *skiplock.OutboxStats
	Schedules   skiplock.ScheduleStats
	NextFireIn  time.Duration
	ChartWindow time.Duration
	Horizon     skiplock.HorizonStats
	HorizonBad  bool // held long enough to matter (horizonConcern)
}

// overviewSamplePages caps the heap pages the overview reads to count finished jobs
// (StatsOpts.SamplePages): a table of up to 8 MB is counted exactly, a larger one
// estimated from a sample of that size, which is plenty for figures shown rounded by
// the eye and halves the page's largest read against the default.
const overviewSamplePages = 1000

// horizonConcern is how long a transaction may hold the vacuum horizon before the
// overview marks it: Config.HorizonWarning's default, when the client logs it too.
const horizonConcern = 5 * time.Minute

func (h *handler) overview(q *request) {
	s, err := h.c.Stats(q.ctx, &skiplock.StatsOpts{RecentWindow: chartWindow, SamplePages: overviewSamplePages})
	if err != nil {
		h.failErr(q, err)
		return
	}
	rows, err := h.queueRows(q, s)
	if err != nil {
		h.failErr(q, err)
		return
	}
	now := h.now()
	points, err := h.c.Throughput(q.ctx, chartWindow, chartBucket)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d := overviewData{Queues: rows, Recent: s.Recent, Estimated: s.FinishedEstimated, Schedules: s.Schedules, ChartWindow: chartWindow,
		Horizon: s.Horizon, HorizonBad: s.Horizon.HeldForKnown && s.Horizon.HeldFor >= horizonConcern}
	all := bucketize(points, now, chartWindow, chartBucket, "")
	d.Throughput = barChart("chart-throughput", "Jobs succeeded per 5 minutes, last hour", all, []series{{"succeeded", "s-succeeded", all.succeeded}}, 640, 160)
	d.Failures = barChart("chart-failures", "Jobs failed and cancelled per 5 minutes, last hour", all,
		[]series{{"failed", "s-failed", all.failed}, {"cancelled", "s-cancelled", all.cancelled}}, 640, 160)
	for i := range d.Queues {
		b := bucketize(points, now, chartWindow, chartBucket, d.Queues[i].Queue)
		d.Queues[i].Sparkline = sparkline(d.Queues[i].Queue, b)
	}
	if h.ob != nil {
		d.Outbox = &s.Outbox
	}
	if !s.Schedules.NextFireAt.IsZero() {
		d.NextFireIn = s.Schedules.NextFireAt.Sub(now)
	}
	h.render(q, http.StatusOK, "overview", "Overview", "overview", d)
}

// queueRows merges the queues with live jobs (Stats), those with settings (QueueList)
// and those the client is configured to work, so a paused or idle queue is listed
// too. (A queue that only finished jobs name is not: finding those would read the
// whole table.)
func (h *handler) queueRows(q *request, s *skiplock.Stats) ([]queueRow, error) {
	settings, err := h.c.QueueList(q.ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*queueRow{}
	var rows []*queueRow
	for _, qs := range s.Queues {
		r := &queueRow{QueueStats: qs}
		byName[qs.Queue] = r
		rows = append(rows, r)
	}
	row := func(name string) *queueRow {
		r := byName[name]
		if r == nil {
			r = &queueRow{QueueStats: skiplock.QueueStats{Queue: name}}
			byName[name] = r
			rows = append(rows, r)
		}
		return r
	}
	for _, st := range settings {
		r := row(st.Name)
		r.Paused = st.Paused
		r.PausedAt = st.PausedAt
	}
	// Queues with no live job are listed too when this client's configuration names
	// them (and any queue can be paused by name on the queues page).
	for _, name := range h.c.ConfiguredQueues() {
		row(name)
	}
	slices.SortFunc(rows, func(a, b *queueRow) int { return cmp.Compare(a.Queue, b.Queue) })
	out := make([]queueRow, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	return out, nil
}

// --- queues ---

type queuesData struct{ Queues []queueRow }

func (h *handler) queues(q *request) {
	s, err := h.c.Stats(q.ctx, &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
	if err != nil {
		h.failErr(q, err)
		return
	}
	rows, err := h.queueRows(q, s)
	if err != nil {
		h.failErr(q, err)
		return
	}
	h.render(q, http.StatusOK, "queues", "Queues", "queues", queuesData{Queues: rows})
}

// --- schedules ---

type scheduleRow struct {
	*skiplock.Schedule
	PayloadText string
	Redacted    bool
	LastJobURL  string
	NextIn      time.Duration
}

type schedulesData struct{ Schedules []scheduleRow }

func (h *handler) schedules(q *request) {
	list, err := h.c.ScheduleList(q.ctx)
	if err != nil {
		h.failErr(q, err)
		return
	}
	show, now := h.showPayloads(q.r), h.now()
	var d schedulesData
	for _, s := range list {
		r := scheduleRow{Schedule: s, Redacted: !show}
		if show {
			r.PayloadText = oneLine(120, string(s.Payload))
		}
		if s.LastJobID != "" {
			r.LastJobURL = q.prefix + "/jobs/" + s.LastJobID
		}
		if !s.NextFireAt.IsZero() {
			r.NextIn = s.NextFireAt.Sub(now)
		}
		d.Schedules = append(d.Schedules, r)
	}
	h.render(q, http.StatusOK, "schedules", "Schedules", "schedules", d)
}

// --- outbox ---
