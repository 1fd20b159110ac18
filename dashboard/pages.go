package dashboard

import (
	"cmp"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/uuidv7"
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
	case seg[0] == "tx" && len(seg) == 2 && get:
		h.lineage(q, seg[1])
	case q.path == "/logout" && !get:
		h.logout(q)
	default:
		if !get && len(seg) > 0 && slices.Contains([]string{"", "jobs", "queues", "schedules", "outbox", "tx", "batches", "flows", "limits"}, seg[0]) && len(seg) <= 1 {
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

// --- jobs ---

// jobFilter is the jobs page's filter, read from and written to its query string.
type jobFilter struct {
	States []string
	Queue  string
	Kind   string
	Tag    string
	Search string
}

func parseFilter(v url.Values) (jobFilter, error) {
	f := jobFilter{Queue: strings.TrimSpace(v.Get("queue")), Kind: strings.TrimSpace(v.Get("kind")),
		Tag: strings.TrimSpace(v.Get("tag")), Search: strings.TrimSpace(v.Get("q"))}
	for _, s := range v["state"] {
		for _, s := range strings.Split(s, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			if _, err := skiplock.ParseJobState(s); err != nil {
				return f, err
			}
			if !slices.Contains(f.States, s) {
				f.States = append(f.States, s)
			}
		}
	}
	return f, nil
}

func (f jobFilter) values() url.Values {
	v := url.Values{}
	if len(f.States) > 0 {
		v.Set("state", strings.Join(f.States, ","))
	}
	for k, s := range map[string]string{"queue": f.Queue, "kind": f.Kind, "tag": f.Tag, "q": f.Search} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Hidden lists the filter as name/value pairs for hidden form fields.
func (f jobFilter) Hidden() [][2]string {
	var out [][2]string
	v := f.values()
	for _, k := range []string{"state", "queue", "kind", "tag", "q"} {
		if s := v.Get(k); s != "" {
			out = append(out, [2]string{k, s})
		}
	}
	return out
}

// Empty reports whether the filter matches every job.
func (f jobFilter) Empty() bool { return len(f.values()) == 0 }

// HasState reports whether the filter selects state (for the state selector).
func (f jobFilter) HasState(s string) bool { return slices.Contains(f.States, s) }

// params builds the listing's parameters; states, when not nil, replace the filter's.
func (f jobFilter) params(states []string) skiplock.ListParams {
	p := skiplock.ListParams{Queue: f.Queue, Kind: f.Kind, Tag: f.Tag, Search: f.Search}
	if states == nil {
		states = f.States
	}
	for _, s := range states {
		p.States = append(p.States, skiplock.JobState(s))
	}
	return p
}

func (h *handler) jobsURL(q *request, f jobFilter, extra url.Values) string {
	v := f.values()
	for k, s := range extra {
		v[k] = s
	}
	if len(v) == 0 {
		return q.prefix + "/jobs"
	}
	return q.prefix + "/jobs?" + v.Encode()
}

type jobRow struct {
	*skiplock.Job
	URL  string
	Tags []string
	// RunAtAgo and UpdatedAgo are the times relative to now ("3m ago", "in 5s"); the
	// template shows the UTC time on hover.
	RunAtAgo, UpdatedAgo string
	// Select shows the row's checkbox for the bulk actions on selected jobs.
	Select bool
}

// newJobRow prepares a job for the "jobtable" template.
func newJobRow(q *request, j *skiplock.Job, now time.Time, sel bool) jobRow {
	return jobRow{Job: j, URL: q.prefix + "/jobs/" + j.ID, Tags: j.Tags,
		RunAtAgo: relative(now, j.RunAt), UpdatedAgo: relative(now, j.UpdatedAt), Select: sel}
}

type bulkLink struct {
	Action jobAction
	URL    string
}

// stateCount is one state's figure above the job list: exact for the live states
// (counted by Stats), the planner's estimate for the finished ones.
type stateCount struct {
	State     string
	N         int64
	Known     bool // false: too few for the statistics to list
	Estimated bool
	URL       string
	Active    bool
}

type jobsData struct {
	Filter         jobFilter
	States         []string
	Queues         []string
	Counts         []stateCount
	Jobs           []jobRow
	NextURL        string
	PrevURL        string
	FirstURL       string
	ClearURL       string
	Oldest         bool   // oldest first (the default is newest first)
	OrderURL       string // the same filter in the other order
	Bounded        bool   // the page stopped at the scan budget
	ScanBudget     int
	Bulk           []bulkLink
	Selectable     []jobAction // the bulk actions this viewer may take on selected jobs
	SearchDisabled bool        // payloads are redacted for this viewer, so their text is not searchable
}

func (h *handler) jobs(q *request) {
	v := q.r.URL.Query()
	if id := strings.TrimSpace(v.Get("id")); v.Has("id") {
		if !uuidv7.Valid(id) {
			h.fail(q, http.StatusBadRequest, "A job id is a UUID (like 0190a5c8-7f7e-7a3c-9b1d-2c4e5f6a7b8c).")
			return
		}
		h.redirect(q, q.prefix+"/jobs/"+strings.ToLower(id))
		return
	}
	f, err := parseFilter(v)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d := jobsData{Filter: f, ClearURL: q.prefix + "/jobs", Oldest: v.Get("order") == "oldest", ScanBudget: skiplock.DefaultScanBudget}
	if !h.showPayloads(q.r) {
		d.SearchDisabled = true
		if f.Search != "" {
			h.fail(q, http.StatusForbidden, "Searching job arguments needs permission to see payloads.")
			return
		}
	}
	for _, s := range skiplock.JobStates {
		d.States = append(d.States, string(s))
	}
	order := url.Values{}
	if d.Oldest {
		order.Set("order", "oldest")
		d.OrderURL = h.jobsURL(q, f, nil)
	} else {
		d.OrderURL = h.jobsURL(q, f, url.Values{"order": {"oldest"}})
	}
	p := skiplock.PageParams{ListParams: f.params(nil), NewestFirst: !d.Oldest, BeforeID: v.Get("before")}
	p.AfterID, p.Limit = v.Get("after"), h.opts.PageSize
	page, err := h.c.JobPage(q.ctx, p)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d.Bounded = page.Bounded
	if page.Next != "" {
		d.NextURL = h.jobsURL(q, f, with(order, "after", page.Next))
	}
	if page.Prev != "" {
		d.PrevURL = h.jobsURL(q, f, with(order, "before", page.Prev))
	}
	if p.AfterID != "" || p.BeforeID != "" {
		d.FirstURL = h.jobsURL(q, f, order)
	}
	for _, a := range jobActions {
		if h.can(q.r, a.Bulk) {
			d.Selectable = append(d.Selectable, a)
			v := f.values()
			v.Set("action", a.Name)
			d.Bulk = append(d.Bulk, bulkLink{Action: a, URL: q.prefix + "/jobs/bulk?" + v.Encode()})
		}
	}
	now := h.now()
	for _, j := range page.Jobs {
		d.Jobs = append(d.Jobs, newJobRow(q, j, now, len(d.Selectable) > 0))
	}
	s, err := h.c.Stats(q.ctx, &skiplock.StatsOpts{SamplePages: -1, RecentWindow: -1})
	if err != nil {
		h.failErr(q, err)
		return
	}
	for _, qs := range s.Queues {
		d.Queues = append(d.Queues, qs.Queue)
	}
	est, err := h.c.JobStateEstimates(q.ctx)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d.Counts = stateCounts(q, h, f, s, est)
	h.render(q, http.StatusOK, "jobs", "Jobs", "jobs", d)
}

// with returns a copy of v with k set to s.
func with(v url.Values, k, s string) url.Values {
	out := url.Values{k: {s}}
	for key, vals := range v {
		out[key] = vals
	}
	return out
}

// stateCounts are the figures per state: the live states' exact counts (Stats sums
// them over the queues), the finished states' estimates (JobStateEstimates), each a
// link to the list of that state with the rest of the filter.
func stateCounts(q *request, h *handler, f jobFilter, s *skiplock.Stats, est map[skiplock.JobState]int64) []stateCount {
	exact := map[skiplock.JobState]int64{skiplock.StatePending: 0, skiplock.StateRunning: 0, skiplock.StateWaiting: 0}
	for _, qs := range s.Queues {
		exact[skiplock.StatePending] += qs.Pending
		exact[skiplock.StateRunning] += qs.Running
		exact[skiplock.StateWaiting] += qs.Waiting
	}
	var out []stateCount
	for _, st := range skiplock.JobStates {
		c := stateCount{State: string(st), Active: f.HasState(string(st))}
		if n, ok := exact[st]; ok {
			c.N, c.Known = n, true
		} else {
			c.N, c.Known = est[st]
			c.Estimated = true
		}
		g := f
		g.States = []string{string(st)}
		c.URL = h.jobsURL(q, g, nil)
		out = append(out, c)
	}
	return out
}

type metaPair struct{ Key, Value string }

type attemptRow struct {
	skiplock.AttemptRecord
	Took time.Duration
}

type jobData struct {
	Job        *skiplock.Job
	Args       string
	Output     string
	Redacted   bool
	Metadata   []metaPair
	Tags       []string
	History    []attemptRow
	LineageURL string
	TxID       int64
	Actions    []jobAction
	RunAtIn    time.Duration
	// Flow is the tree of the flow the job belongs to (docs/flows.md), drawn row by
	// row; empty for a job outside any flow.
	Flow          []flowRow
	FlowTruncated bool
}

// flowRow is one job of a flow's tree: Prefix draws the branches ("├─ ").
type flowRow struct {
	Prefix  string
	Node    *skiplock.FlowNode
	URL     string
	Current bool
}

// flowRows draws n's tree depth first.
func flowRows(q *request, n *skiplock.FlowNode, first, rest, current string, out []flowRow) []flowRow {
	out = append(out, flowRow{Prefix: first, Node: n, URL: q.prefix + "/jobs/" + n.ID, Current: n.ID == current})
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			out = flowRows(q, c, rest+"└─ ", rest+"   ", current, out)
		} else {
			out = flowRows(q, c, rest+"├─ ", rest+"│  ", current, out)
		}
	}
	return out
}

func (h *handler) job(q *request, id string) {
	j, err := h.c.JobGet(q.ctx, id)
	if err != nil {
		h.failErr(q, err)
		return
	}
	d := jobData{Job: j, Tags: j.Tags, TxID: j.TxID}
	if h.showPayloads(q.r) {
		d.Args, d.Output = pretty(j.Payload), pretty(j.Output)
	} else {
		d.Redacted = true
	}
	for k, v := range j.Metadata {
		d.Metadata = append(d.Metadata, metaPair{k, v})
	}
	slices.SortFunc(d.Metadata, func(a, b metaPair) int { return cmp.Compare(a.Key, b.Key) })
	for _, a := range j.History {
		r := attemptRow{AttemptRecord: a}
		if !a.FinishedAt.IsZero() && !a.StartedAt.IsZero() {
			r.Took = a.FinishedAt.Sub(a.StartedAt)
		}
		d.History = append(d.History, r)
	}
	if d.TxID != 0 {
		d.LineageURL = q.prefix + "/tx/" + strconv.FormatInt(d.TxID, 10)
	}
	for _, a := range jobActions {
		if slices.Contains(a.From, j.State) && h.can(q.r, a.Single) {
			d.Actions = append(d.Actions, a)
		}
	}
	if j.State == skiplock.StatePending {
		d.RunAtIn = j.RunAt.Sub(h.now())
	}
	root, truncated, err := h.c.FlowTree(q.ctx, j.ID)
	if err != nil {
		h.failErr(q, err)
		return
	}
	if len(root.Children) > 0 {
		d.Flow, d.FlowTruncated = flowRows(q, root, "", "", j.ID, nil), truncated
	}
	h.render(q, http.StatusOK, "job", "Job "+j.ID, "jobs", d)
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
