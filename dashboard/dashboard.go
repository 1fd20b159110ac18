// Package dashboard is a web dashboard for a skiplock schema: an http.Handler to
// mount in an application's own server (or run alone with `skiplock dashboard`).
//
//	h, err := dashboard.New(client, ob, dashboard.Options{ // ob may be nil: no outbox pages
//		Authorize: func(r *http.Request, action string) bool { return isAdmin(r) },
//	})
//	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", h))
//	// or, without StripPrefix: Options{BasePath: "/admin/jobs"} and mux.Handle("/admin/jobs/", h)
//
// It is server-rendered (html/template) with one small stylesheet and one small
// script embedded in the binary: no CDN, no build step, and every page and action
// works without JavaScript (the script only refreshes the live figures in place and
// asks before cancelling or deleting a job).
//
// # Pages
//
//	/                      overview: per queue its counts by state, oldest due age and
//	                       pause; throughput and failures over the last hour (inline SVG)
//	/jobs                  jobs newest first (or oldest), filtered by state, queue, kind,
//	                       tag and text, with counts per state, paged both ways; each
//	                       page examines at most skiplock.DefaultScanBudget jobs
//	/jobs/{id}             one job: arguments, output, metadata, attempt timeline, actions
//	/jobs/bulk             the confirmation of an action on every job a filter matches,
//	                       or on the jobs selected (id=…)
//	/queues                queues (also configured and paused ones without jobs) with
//	                       pause and resume, and pause by name
//	/batches               batches, newest first, with their counts and callbacks
//	/flows                 jobs waiting on others (flow parents, batch callbacks)
//	/limits                concurrency and rate limits with their use; set and delete
//	/fair                  fair queues: each one's keys with the most due jobs, the age
//	                       of each one's oldest due job, and their weights
//	/schedules             periodic schedules with pause, resume and trigger
//	/outbox                outbox events by state (pending, dead, published), lag, requeue
//	/outbox/{id}           one event
//	/outbox/requeue-dead   the confirmation of requeueing every dead event
//	/tx/{txid}             lineage: the jobs (paged) and outbox events one transaction wrote
//	                       (?job=ID, as a job's page links it: that job when its
//	                       transaction wrote only it, which records no lineage)
//
// # Security
//
// The dashboard is read-only unless Options.Authorize allows an action (the Action
// constants name them); a refused action answers 403 and its buttons are not shown.
// Every POST must carry the CSRF token of the browser's session (a random cookie,
// the token an HMAC of it under Options.CSRFKey) in the form field "csrf", and must
// not come from another origin (Sec-Fetch-Site, Origin): else 403. Every response
// carries a strict Content-Security-Policy (default-src 'self', no inline script or
// style), X-Frame-Options DENY and X-Content-Type-Options nosniff. With
// Options.RedactPayloads, job arguments and outputs, schedule payloads and outbox
// payloads and headers are shown only to viewers authorised for ActionViewPayloads.
//
// Authentication is the embedding application's (its middleware around the handler),
// or, for a dashboard served on its own, Options.Token and Options.BasicUser.
//
// The dashboard reads with the client's pool: the read-only dashboard role of
// docs/roles.md renders every page. Job, queue and schedule actions need the worker
// role's grants, outbox requeues the relay role's.
//
// # Element ids for browser tests
//
// Pages and controls carry stable data-testid attributes (rows also carry the id or
// name they show in data-job-id, data-event-id, data-queue or data-schedule, and
// attempt-row its number in data-attempt):
//
//	layout     nav-overview nav-jobs nav-queues nav-schedules nav-batches nav-flows
//	           nav-limits nav-fair nav-outbox flash error
//	           live-region (the part live refresh replaces; also id="live")
//	           live-toggle (checkbox shown by the script) live-status logout read-only
//	overview   overview queues-table queue-row queue-name queue-paused queue-pending
//	           queue-due queue-running queue-retrying queue-succeeded queue-failed
//	           queue-cancelled queue-oldest-due queue-sparkline chart-throughput
//	           chart-failures recent-succeeded recent-failed recent-cancelled
//	           outbox-summary outbox-lag outbox-unpublished outbox-dead-count
//	           schedules-summary
//	jobs       jobs jobs-filter filter-state filter-queue filter-kind filter-tag
//	           filter-search filter-submit filter-clear jobs-table job-row job-link
//	           job-row-state job-run-at job-updated jobs-empty jobs-next jobs-prev
//	           jobs-first jobs-order jobs-order-toggle jobs-bounded state-counts
//	           state-count (data-state) jobs-jump jump-id jump-submit bulk-retry
//	           bulk-cancel bulk-delete bulk-run-now job-select select-form
//	           selected-bulk-retry selected-bulk-cancel selected-bulk-delete
//	           selected-bulk-run-now
//	job        job-detail job-id job-state job-queue job-kind job-attempt job-error
//	           job-args job-output job-metadata job-tags job-history attempt-row
//	           job-lineage action-retry action-cancel action-delete action-run-now
//	confirm    bulk-confirm bulk-action bulk-count bulk-submit bulk-back
//	queues     queues queues-table queue-row queue-state queue-pause queue-resume
//	           queue-pause-form queue-pause-name queue-pause-named
//	batches    batches batches-table batch-row (data-batch-id) batch-state
//	           batch-on-complete batch-on-failure batches-empty batches-next
//	           batches-first batches-open batches-all
//	flows      flows flows-empty flows-next flows-prev flows-first flows-bounded
//	           (rows as on jobs)
//	limits     limits limits-table limit-row (data-limit) limit-usage limit-delete
//	           limits-empty limit-form limit-scope limit-name limit-key
//	fair       fair fair-queue (data-queue) fair-keys fair-key (data-key) fair-empty
//	           limit-max-running limit-rate limit-per limit-submit
//	schedules  schedules schedules-table schedule-row schedule-state schedule-pause
//	           schedule-resume schedule-trigger schedule-last-job schedules-empty
//	outbox     outbox outbox-tab-pending outbox-tab-dead outbox-tab-published
//	           outbox-lag outbox-unpublished outbox-dead-count outbox-table event-row
//	           event-link outbox-empty outbox-next outbox-first outbox-requeue-dead
//	           event-requeue
//	event      event-detail event-id event-state event-payload event-headers
//	           event-error event-requeue event-lineage
//	lineage    lineage lineage-jobs lineage-events job-row event-row lineage-next
//	           lineage-first
//	login      login-form login-token login-submit login-error
//
// Forms post to the paths their pages link from; each action's submit button has the
// testid above, and every form carries the hidden field "csrf" (each page also holds
// the session's token in <meta name="csrf-token">). With the script, action-cancel
// and action-delete first ask with window.confirm (their form's data-confirm): a
// browser test accepts the dialog.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/outbox"
)

// The actions Options.Authorize is asked about. Single-job actions and their bulk
// forms are separate actions, so an application can allow one without the other.
const (
	ActionViewPayloads = "view.payloads" // see job arguments and outputs, event payloads (Options.RedactPayloads)

	ActionJobRetry  = "job.retry"
	ActionJobCancel = "job.cancel"
	ActionJobDelete = "job.delete"
	ActionJobRunNow = "job.run_now"

	ActionBulkRetry  = "jobs.retry" // every job a filter matches
	ActionBulkCancel = "jobs.cancel"
	ActionBulkDelete = "jobs.delete"
	ActionBulkRunNow = "jobs.run_now"

	ActionQueuePause  = "queue.pause"
	ActionQueueResume = "queue.resume"

	ActionSchedulePause   = "schedule.pause"
	ActionScheduleResume  = "schedule.resume"
	ActionScheduleTrigger = "schedule.trigger"

	ActionLimitSet    = "limit.set"    // add or change a concurrency or rate limit (/limits)
	ActionLimitDelete = "limit.delete" // delete one

	ActionOutboxRequeue     = "outbox.requeue"
	ActionOutboxRequeueDead = "outbox.requeue_dead" // every dead event
)

// Options configure the dashboard. The zero value is a read-only dashboard served at
// whatever path it is mounted under.
type Options struct {
	// BasePath is the path the dashboard is reachable at from the browser ("/admin/jobs").
	// Requests whose path starts with it have it removed, so the handler can be mounted
	// as it is (mux.Handle("/admin/jobs/", h)); a request someone else already stripped
	// it from (http.StripPrefix) is served as it comes. Default "": the prefix is found
	// from the request (what http.StripPrefix removed), so the handler works mounted
	// anywhere with StripPrefix, or at the root.
	BasePath string
	// Authorize says whether the request may perform action (one of the Action
	// constants). Buttons of actions it refuses are not shown, and their requests are
	// refused with 403. Default nil: read-only, no action allowed.
	Authorize func(r *http.Request, action string) bool
	// RedactPayloads shows job arguments and outputs, schedule payloads and outbox
	// payloads and headers only to requests Authorize allows ActionViewPayloads;
	// others see "redacted" (and cannot search job arguments). Default false.
	RedactPayloads bool
	// CSRFKey is the HMAC key of the CSRF tokens, at least 16 bytes: give the same
	// random key to every replica behind a load balancer. Default: 32 random bytes at
	// New (tokens then last as long as the process).
	CSRFKey []byte
	// RefreshInterval is how often pages refresh their figures in place (with
	// JavaScript). Default 5s; negative disables live refresh.
	RefreshInterval time.Duration
	// PageSize is the number of rows of a job or event listing. Default 50, at most 1000.
	PageSize int
	// Title names the dashboard in page titles and the header. Default "skiplock".
	Title string
	// Token, when set, is required of every request (static assets and the login form
	// excepted): as "Authorization: Bearer <token>", or through the cookie the login
	// form at <base>/login sets. For a dashboard served on its own; an application
	// usually authenticates with its own middleware instead.
	Token string
	// BasicUser and BasicPassword, when BasicUser is set, are required of every request
	// as HTTP basic authentication (static assets excepted). With Token also set,
	// either is accepted.
	BasicUser, BasicPassword string
	// Logger receives server errors (a failed database read, say). Default: slog.Default().
	Logger *slog.Logger
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

type handler struct {
	c      *skiplock.Client
	ob     *outbox.Outbox
	opts   Options
	key    []byte
	pages  map[string]*template.Template
	cop    *http.CrossOriginProtection
	static map[string]asset
	// assetVersion is a hash of the assets, appended to their URLs so a new build is
	// fetched despite caching.
	assetVersion string
	loginKey     []byte // derives the login cookie's value from Options.Token
}

type asset struct {
	body        []byte
	contentType string
}

// New returns the dashboard of client's schema; ob, when not nil, adds the outbox
// pages (it must be client's outbox).
func New(client *skiplock.Client, ob *outbox.Outbox, opts Options) (http.Handler, error) {
	if client == nil {
		return nil, errors.New("dashboard: client is nil")
	}
	if ob != nil && ob.Schema() != client.Schema() {
		return nil, fmt.Errorf("dashboard: the outbox is schema %q's, the client schema %q's", ob.Schema(), client.Schema())
	}
	if opts.BasePath != "" {
		if !strings.HasPrefix(opts.BasePath, "/") || strings.ContainsAny(opts.BasePath, "?#") {
			return nil, fmt.Errorf("dashboard: BasePath %q must be a path starting with /", opts.BasePath)
		}
		opts.BasePath = strings.TrimRight(opts.BasePath, "/")
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = 5 * time.Second
	}
	switch {
	case opts.PageSize == 0:
		opts.PageSize = 50
	case opts.PageSize < 0 || opts.PageSize > 1000:
		return nil, fmt.Errorf("dashboard: PageSize %d: want 1..1000", opts.PageSize)
	}
	if opts.Title == "" {
		opts.Title = "skiplock"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BasicUser == "" && opts.BasicPassword != "" {
		return nil, errors.New("dashboard: BasicPassword without BasicUser")
	}
	if len(opts.CSRFKey) > 0 && len(opts.CSRFKey) < 16 {
		return nil, fmt.Errorf("dashboard: CSRFKey is %d bytes: want at least 16", len(opts.CSRFKey))
	}
	h := &handler{c: client, ob: ob, opts: opts, cop: http.NewCrossOriginProtection()}
	if len(opts.CSRFKey) > 0 {
		h.key = append([]byte(nil), opts.CSRFKey...)
	} else {
		h.key = make([]byte, 32)
		rand.Read(h.key)
	}
	if opts.Token != "" {
		h.loginKey = mac([]byte(opts.Token), "skiplock dashboard login")
	}
	var err error
	if h.pages, err = parseTemplates(); err != nil {
		return nil, err
	}
	if err := h.loadStatic(); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *handler) loadStatic() error {
	h.static = map[string]asset{}
	sum := sha256.New()
	err := fs.WalkDir(staticFS, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(path)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path, "static/")
		ct := "application/octet-stream"
		switch {
		case strings.HasSuffix(name, ".css"):
			ct = "text/css; charset=utf-8"
		case strings.HasSuffix(name, ".js"):
			ct = "text/javascript; charset=utf-8"
		case strings.HasSuffix(name, ".svg"):
			ct = "image/svg+xml"
		}
		h.static[name] = asset{body: b, contentType: ct}
		sum.Write([]byte(name))
		sum.Write(b)
		return nil
	})
	h.assetVersion = hex.EncodeToString(sum.Sum(nil))[:12]
	return err
}

// csp is the Content-Security-Policy of every response: nothing inline, nothing from
// elsewhere, no framing, forms only to this origin.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// request is what the handlers of one request share.
type request struct {
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context
	prefix string // the path the dashboard is served under, without a trailing slash
	path   string // the path below it, starting with "/"
	csrf   string // the session's token for forms
	authed bool   // authenticated by Options.Token or BasicUser (for the logout button)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	prefix, path, ok := h.split(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	q := &request{w: w, r: r, ctx: r.Context(), prefix: prefix, path: path}
	if name, ok := strings.CutPrefix(path, "/static/"); ok {
		h.serveStatic(q, name)
		return
	}
	if path == "/favicon.ico" { // browsers ask for it whatever the page's <link rel="icon">
		h.serveStatic(q, "favicon.svg")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		hd.Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	hd.Set("Cache-Control", "no-store")
	if path == "/login" {
		h.login(q)
		return
	}
	if !h.authenticate(q) {
		return
	}
	h.session(q)
	if r.Method == http.MethodPost {
		if err := h.cop.Check(r); err != nil {
			h.fail(q, http.StatusForbidden, "Refused: a cross-origin request.")
			return
		}
		if !h.checkCSRF(q) {
			h.fail(q, http.StatusForbidden, "Refused: the form's security token is missing or wrong. Reload the page and try again.")
			return
		}
	}
	h.route(q)
}

// split returns the prefix the dashboard is served under and the request's path
// below it. ok is false for a request outside Options.BasePath.
func (h *handler) split(r *http.Request) (prefix, path string, ok bool) {
	raw := r.RequestURI
	if u, err := url.ParseRequestURI(raw); err == nil {
		raw = u.EscapedPath()
	} else {
		raw = ""
	}
	esc := r.URL.EscapedPath()
	stripped := raw != "" && raw != esc
	path = r.URL.Path
	switch {
	case h.opts.BasePath != "" && !stripped:
		rest, found := strings.CutPrefix(path, h.opts.BasePath)
		if !found || (rest != "" && !strings.HasPrefix(rest, "/")) {
			return "", "", false
		}
		prefix, path = h.opts.BasePath, rest
	case h.opts.BasePath != "":
		prefix = h.opts.BasePath
	case stripped && strings.HasSuffix(raw, esc):
		// What http.StripPrefix (or a router like it) removed.
		p, err := url.PathUnescape(strings.TrimSuffix(raw, esc))
		if err == nil {
			prefix = strings.TrimRight(p, "/")
		}
	}
	if path == "" {
		path = "/"
	}
	return prefix, path, true
}

func (h *handler) serveStatic(q *request, name string) {
	a, ok := h.static[name]
	if !ok || (q.r.Method != http.MethodGet && q.r.Method != http.MethodHead) {
		http.NotFound(q.w, q.r)
		return
	}
	q.w.Header().Set("Content-Type", a.contentType)
	if q.r.URL.Query().Get("v") == h.assetVersion {
		q.w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		q.w.Header().Set("Cache-Control", "no-cache")
	}
	q.w.WriteHeader(http.StatusOK)
	if q.r.Method == http.MethodGet {
		q.w.Write(a.body)
	}
}

// can reports whether the request may perform action.
func (h *handler) can(r *http.Request, action string) bool {
	return h.opts.Authorize != nil && h.opts.Authorize(r, action)
}

// showPayloads reports whether the request may see payloads.
func (h *handler) showPayloads(r *http.Request) bool {
	return !h.opts.RedactPayloads || h.can(r, ActionViewPayloads)
}

// now is the time ages are measured from: the client's clock, else the host's.
func (h *handler) now() time.Time {
	if c := h.c.Clock(); c != nil {
		return c.Now()
	}
	return hostclock.Now()
}

// --- sessions, CSRF and authentication ---
