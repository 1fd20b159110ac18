package dashboard

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/uuidv7"
)

// The jobs pages: the filtered, paged list and one job's detail.

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
	exact := map[skiplock.JobState]int64{skiplock.StatePending: 0, skiplock.StateClaimed: 0, skiplock.StateRunning: 0, skiplock.StateWaiting: 0}
	for _, qs := range s.Queues {
		exact[skiplock.StatePending] += qs.Pending
		exact[skiplock.StateClaimed] += qs.Claimed
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
		// With the job's id: a transaction that wrote only this job (Client.Enqueue)
		// recorded no lineage, and the lineage page then shows the job itself.
		d.LineageURL = q.prefix + "/tx/" + strconv.FormatInt(d.TxID, 10) + "?" + url.Values{"job": {j.ID}}.Encode()
	}
	for _, a := range jobActions {
		if slices.Contains(a.From, j.State) && h.can(q.r, a.Single) {
			d.Actions = append(d.Actions, a)
		}
	}
	if j.State == skiplock.StatePending {
		d.RunAtIn = j.RunAt.Sub(h.now())
	}
	// The Citus layout has no flows (FlowTree refuses it there): the page has no tree.
	root, truncated, err := h.c.FlowTree(q.ctx, j.ID)
	if err != nil && !errors.Is(err, skiplock.ErrNotOnCitus) {
		h.failErr(q, err)
		return
	}
	if err == nil && len(root.Children) > 0 {
		d.Flow, d.FlowTruncated = flowRows(q, root, "", "", j.ID, nil), truncated
	}
	h.render(q, http.StatusOK, "job", "Job "+j.ID, "jobs", d)
}
