package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/outbox"
)

// pages lists every page of a seeded fixture with a testid it must show.
func (f *fixture) pages() map[string]string {
	p := map[string]string{
		"/":                              "queues-table",
		"/jobs":                          "jobs-table",
		"/jobs?state=failed&queue=mail":  "job-row",
		"/queues":                        "queue-row",
		"/schedules":                     "schedule-row",
		"/outbox":                        "event-row",
		"/outbox?state=dead":             "event-row",
		"/outbox?state=published":        "event-row",
		"/outbox/" + f.events["dead"]:    "event-detail",
		"/outbox/" + f.events["pending"]: "event-detail",
	}
	for _, s := range skiplock.JobStates {
		p["/jobs/"+f.jobs[s]] = "job-detail"
	}
	p["/tx/"+strconv.FormatInt(f.txid, 10)] = "lineage-jobs"
	return p
}

func TestEveryPageRenders(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	for path, id := range f.pages() {
		r := b.get(path)
		wantStatus(t, path, r, http.StatusOK)
		if testids(r.body, id) == 0 {
			t.Errorf("%s: no %s\n%s", path, id, r.body)
		}
		if !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("%s: Content-Type %q", path, r.header.Get("Content-Type"))
		}
	}
	// Authorised pages: the bulk confirmations.
	for _, path := range []string{"/jobs/bulk?action=retry", "/jobs/bulk?action=cancel&queue=mail", "/jobs/bulk?action=delete&state=succeeded", "/outbox/requeue-dead"} {
		r := b.get(path)
		wantStatus(t, path, r, http.StatusOK)
		if testids(r.body, "bulk-confirm") != 1 {
			t.Errorf("%s: no bulk-confirm", path)
		}
	}

	// The overview: every queue with jobs, and the paused one without.
	r := b.get("/")
	for _, q := range []string{"mail", "reports", "paused", "idle"} {
		if !strings.Contains(r.body, `data-testid="queue-row" data-queue="`+q+`"`) {
			t.Errorf("overview: no row for queue %s", q)
		}
	}
	for _, id := range []string{"chart-throughput", "chart-failures", "outbox-summary", "schedules-summary", "recent-succeeded", "live-region",
		"horizon-summary", "horizon-held", "horizon-holder"} {
		if testids(r.body, id) != 1 {
			t.Errorf("overview: %d of %s, want 1", testids(r.body, id), id)
		}
	}
	if n := testids(r.body, "queue-sparkline"); n != 4 {
		t.Errorf("overview: %d sparklines, want 4", n)
	}
	if !regexp.MustCompile(`data-queue="paused">\s*<td data-testid="queue-name">.*?</td>\s*<td data-testid="queue-paused"><span class="state st-paused">paused`).MatchString(r.body) {
		t.Errorf("overview: queue paused is not shown paused")
	}
	// The outbox in each state and its lag.
	for _, s := range outbox.States {
		r := b.get("/outbox?state=" + string(s))
		if !strings.Contains(r.body, `data-event-id="`+f.events[s]+`"`) || strings.Count(r.body, `data-testid="event-row"`) != 1 {
			t.Errorf("outbox %s: want only event %s\n%s", s, f.events[s], r.body)
		}
	}
	// Assets.
	for name, ct := range map[string]string{"dashboard.css": "text/css", "dashboard.js": "text/javascript"} {
		r := b.get("/static/" + name)
		wantStatus(t, name, r, http.StatusOK)
		if !strings.HasPrefix(r.header.Get("Content-Type"), ct) || len(r.body) < 100 {
			t.Errorf("%s: %q, %d bytes", name, r.header.Get("Content-Type"), len(r.body))
		}
	}
	wantStatus(t, "a missing asset", b.get("/static/nope.js"), http.StatusNotFound)
	wantStatus(t, "a missing page", b.get("/nope"), http.StatusNotFound)
	wantStatus(t, "a missing job", b.get("/jobs/00000000-0000-0000-0000-000000000000"), http.StatusNotFound)
	wantStatus(t, "a bad job id", b.get("/jobs/nope"), http.StatusBadRequest)
	wantStatus(t, "a missing event", b.get("/outbox/00000000-0000-0000-0000-000000000000"), http.StatusNotFound)
	wantStatus(t, "a bad state", b.get("/jobs?state=done"), http.StatusBadRequest)
	wantStatus(t, "a bad outbox state", b.get("/outbox?state=sent"), http.StatusBadRequest)
}

// The least-privilege dashboard role (SELECT only) renders every page; an action
// it lacks the grants for is refused with a 403 that says so.
// The write variant — the dashboard's grants plus the worker's — renders every page
// and may act.
func TestWriterRoleActs(t *testing.T) {
	t.Parallel()
	f := seed(t)
	pool := writerRolePool(t, f.client.Schema())
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: f.client.Schema()})
	must(t, err)
	t.Cleanup(c.Close)
	h, err := dashboard.New(c, nil, dashboard.Options{Authorize: allowAll})
	must(t, err)
	b := serve(t, h, "", false)
	for path := range f.pages() {
		if strings.HasPrefix(path, "/outbox") {
			continue // no outbox given
		}
		wantStatus(t, path, b.get(path), http.StatusOK)
	}
	r := b.act("/jobs/"+f.jobs[skiplock.StateFailed]+"/retry", nil)
	if r.code >= 400 {
		t.Fatalf("retry as the writer role: status %d\n%s", r.code, r.body)
	}
	j, err := f.client.JobGet(context.Background(), f.jobs[skiplock.StateFailed])
	must(t, err)
	if j.State != skiplock.StatePending {
		t.Errorf("the retried job is %s", j.State)
	}
}

func TestReadOnlyRoleRendersEveryPage(t *testing.T) {
	t.Parallel()
	f := seed(t)
	pool := dashboardRolePool(t, f.client.Schema())
	c, err := skiplock.NewClient(pool, skiplock.Config{Schema: f.client.Schema()})
	must(t, err)
	t.Cleanup(c.Close)
	ob, err := outbox.New(c, outbox.Config{})
	must(t, err)
	h, err := dashboard.New(c, ob, dashboard.Options{Authorize: allowAll})
	must(t, err)
	b := serve(t, h, "", false)
	for path := range f.pages() {
		wantStatus(t, path, b.get(path), http.StatusOK)
	}
	wantStatus(t, "bulk confirm", b.get("/jobs/bulk?action=retry"), http.StatusOK)
	r := b.act("/jobs/"+f.jobs[skiplock.StateFailed]+"/retry", nil)
	wantStatus(t, "retry as the dashboard role", r, http.StatusForbidden)
	if !strings.Contains(r.body, "worker role") {
		t.Errorf("the refusal does not name the grants needed:\n%s", r.body)
	}
}

func TestJobFilters(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	rows := func(path string) []string {
		t.Helper()
		r := b.get(path)
		wantStatus(t, path, r, http.StatusOK)
		var ids []string
		for _, m := range regexp.MustCompile(`data-testid="job-row" data-job-id="([^"]+)"`).FindAllStringSubmatch(r.body, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	if got := rows("/jobs"); len(got) != 8 {
		t.Errorf("all jobs: %d rows, want 8", len(got))
	}
	for _, s := range skiplock.JobStates {
		got := rows("/jobs?order=oldest&state=" + string(s))
		want := 1
		if s == skiplock.StatePending {
			want = 2 // and the one in the paused queue
		}
		if len(got) != want || got[0] != f.jobs[s] {
			t.Errorf("state %s: %v, want %d starting with %s", s, got, want, f.jobs[s])
		}
	}
	// Newest first unless asked otherwise.
	if newest, oldest := rows("/jobs?state=pending"), rows("/jobs?state=pending&order=oldest"); len(newest) != 2 ||
		len(oldest) != 2 || newest[0] != oldest[1] || newest[1] != oldest[0] {
		t.Errorf("pending newest first %v, oldest first %v: want the same two in opposite orders", newest, oldest)
	}
	if got := rows("/jobs?state=failed,cancelled"); len(got) != 2 {
		t.Errorf("two states: %v", got)
	}
	if got := rows("/jobs?queue=reports"); len(got) != 1 || got[0] != f.jobs[skiplock.StateCancelled] {
		t.Errorf("queue reports: %v", got)
	}
	if got := rows("/jobs?kind=build_report"); len(got) != 2 {
		t.Errorf("kind build_report: %v", got)
	}
	if got := rows("/jobs?kind=build_report&queue=mail"); len(got) != 0 {
		t.Errorf("kind and queue: %v", got)
	}
	if got := rows("/jobs?tag=vip"); len(got) != 1 || got[0] != f.jobs[skiplock.StateSucceeded] {
		t.Errorf("tag vip: %v", got)
	}
	if got := rows("/jobs?tag=eu"); len(got) != 2 {
		t.Errorf("tag eu: %v", got)
	}
	if got := rows("/jobs?tag=eu&state=failed"); len(got) != 1 || got[0] != f.jobs[skiplock.StateFailed] {
		t.Errorf("tag eu, failed: %v", got)
	}
	// Text in the arguments, or in the error.
	if got := rows("/jobs?q=dee%40example"); len(got) != 1 || got[0] != f.jobs[skiplock.StatePending] {
		t.Errorf("text in arguments: %v", got)
	}
	if got := rows("/jobs?q=MAILBOX+unavailable"); len(got) != 1 || got[0] != f.jobs[skiplock.StateFailed] {
		t.Errorf("text in the error: %v", got)
	}
	// Tags show in the rows, and link to their filter on the job page.
	if r := b.get("/jobs?tag=vip"); !strings.Contains(r.body, `<span class="tag">vip</span>`) {
		t.Errorf("no tag in the row")
	}
	r := b.get("/jobs?kind=nothing")
	if testids(r.body, "jobs-empty") != 1 {
		t.Errorf("no match: no jobs-empty")
	}
	// Counts per state: the live ones exact, the finished ones the planner's estimate
	// (none before the table was analysed).
	counts := b.get("/jobs").body
	for state, want := range map[string]string{"pending": "2", "running": "1", "waiting": "1", "failed": "≈ ?"} {
		re := regexp.MustCompile(`data-state="` + state + `"[^>]*>.*?</span> ([^<]+)</a>`)
		if m := re.FindStringSubmatch(counts); m == nil || m[1] != want {
			t.Errorf("count of %s: %v, want %q", state, m, want)
		}
	}
	// The selected state stays selected in the filter form.
	if r := b.get("/jobs?state=failed"); !strings.Contains(r.body, `<option value="failed" selected>`) {
		t.Errorf("the state filter is not kept")
	}
}

func TestJobPaging(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{PageSize: 4}), "", false)
	next := regexp.MustCompile(`href="([^"]+)" data-testid="jobs-next"`)
	r := b.get("/jobs")
	if n := testids(r.body, "job-row"); n != 4 {
		t.Fatalf("first page: %d rows", n)
	}
	m := next.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatal("first page: no next link")
	}
	u, err := url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
	must(t, err)
	r = b.get("/jobs?" + u.RawQuery)
	if n := testids(r.body, "job-row"); n != 4 || next.MatchString(r.body) || testids(r.body, "jobs-first") != 1 {
		t.Errorf("second page: %d rows, next link %v, first link %d", n, next.MatchString(r.body), testids(r.body, "jobs-first"))
	}
	// The previous page is the first again, in the same order.
	m = regexp.MustCompile(`href="([^"]+)" data-testid="jobs-prev"`).FindStringSubmatch(r.body)
	if m == nil {
		t.Fatal("second page: no previous link")
	}
	u, err = url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
	must(t, err)
	back := b.get("/jobs?" + u.RawQuery)
	rowRE := regexp.MustCompile(`data-testid="job-row" data-job-id="([^"]+)"`)
	if got, want := rowRE.FindAllString(back.body, -1), rowRE.FindAllString(b.get("/jobs").body, -1); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("back to the first page: %v, want %v", got, want)
	}
	if testids(back.body, "jobs-prev") != 0 {
		t.Errorf("back on the first page: a previous link")
	}
	// A cursor that is not an id is a bad request, on every page that takes one.
	for _, path := range []string{"/jobs?after=nope", "/jobs?before=nope", "/outbox?after=nope",
		"/outbox?after=0190a5c8-7f7e-7a3c-9b1d-2c4e5f6a7b8c", "/tx/" + strconv.FormatInt(f.txid, 10) + "?after=nope"} {
		wantStatus(t, path, b.get(path), http.StatusBadRequest)
	}
}

// TestJumpToJob: the jobs page's id field opens the job; text that is not an id is a
// bad request.
func TestJumpToJob(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	r := b.get("/jobs?id=+" + strings.ToUpper(f.jobs[skiplock.StateFailed]) + "+")
	wantStatus(t, "jump", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); loc != "/jobs/"+f.jobs[skiplock.StateFailed] {
		t.Errorf("the jump leads to %q, want the job", loc)
	}
	wantStatus(t, "jump to nothing", b.get("/jobs?id=42"), http.StatusBadRequest)
}

// TestFavicon: the icon is served, at the root and as an asset.
func TestFavicon(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	for _, path := range []string{"/favicon.ico", "/static/favicon.svg"} {
		r := b.get(path)
		wantStatus(t, path, r, http.StatusOK)
		if !strings.HasPrefix(r.body, "<svg") {
			t.Errorf("%s: not the icon: %.40q", path, r.body)
		}
	}
}

func TestActionsWhenAuthorised(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	state := func(id string) skiplock.JobState {
		t.Helper()
		j, err := f.client.JobGet(ctx, id)
		must(t, err)
		return j.State
	}

	// The job page shows the actions its state allows.
	r := b.get("/jobs/" + f.jobs[skiplock.StateFailed])
	if testids(r.body, "action-retry") != 1 || testids(r.body, "action-delete") != 1 || testids(r.body, "action-cancel") != 0 {
		t.Errorf("failed job's actions:\n%s", r.body)
	}
	failed := f.jobs[skiplock.StateFailed]
	r = b.act("/jobs/"+failed+"/retry", nil)
	wantStatus(t, "retry", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); !strings.HasPrefix(loc, "/jobs/"+failed+"?") {
		t.Errorf("retry redirects to %q", loc)
	}
	if s := state(failed); s != skiplock.StatePending {
		t.Errorf("retried job is %s", s)
	}
	if r := b.get("/jobs/" + failed + "?done=retry&what=job"); testids(r.body, "flash") != 1 || !strings.Contains(r.body, "Job retried.") {
		t.Errorf("no flash after retry")
	}
	r = b.act("/jobs/"+failed+"/retry", nil)
	wantStatus(t, "retry of a pending job", r, http.StatusConflict)

	running := f.jobs[skiplock.StateRunning]
	wantStatus(t, "cancel", b.act("/jobs/"+running+"/cancel", nil), http.StatusSeeOther)
	if s := state(running); s != skiplock.StateCancelled {
		t.Errorf("cancelled job is %s", s)
	}
	succeeded := f.jobs[skiplock.StateSucceeded]
	r = b.act("/jobs/"+succeeded+"/delete", nil)
	wantStatus(t, "delete", r, http.StatusSeeOther)
	if _, err := f.client.JobGet(ctx, succeeded); err == nil {
		t.Error("deleted job still there")
	}
	wantStatus(t, "delete again", b.act("/jobs/"+succeeded+"/delete", nil), http.StatusNotFound)
	wantStatus(t, "unknown action", b.act("/jobs/"+succeeded+"/explode", nil), http.StatusNotFound)

	// Queues.
	r = b.get("/queues")
	if !strings.Contains(r.body, `data-testid="queue-resume"`) || !strings.Contains(r.body, `data-testid="queue-pause"`) {
		t.Errorf("queue buttons missing")
	}
	wantStatus(t, "pause", b.act("/queues/pause", url.Values{"queue": {"mail"}}), http.StatusSeeOther)
	wantStatus(t, "resume", b.act("/queues/resume", url.Values{"queue": {"paused"}}), http.StatusSeeOther)
	qs, err := f.client.QueueList(ctx)
	must(t, err)
	paused := map[string]bool{}
	for _, q := range qs {
		paused[q.Name] = q.Paused
	}
	if !paused["mail"] || paused["paused"] || !paused["idle"] {
		t.Errorf("queues after pause mail, resume paused: %v", paused)
	}
	wantStatus(t, "pause a bad name", b.act("/queues/pause", url.Values{"queue": {""}}), http.StatusBadRequest)
	// A name nothing uses is refused, unless the form pauses it ahead of its first job.
	wantStatus(t, "pause a misspelt queue", b.act("/queues/pause", url.Values{"queue": {"emial"}}), http.StatusNotFound)
	wantStatus(t, "pause a queue ahead", b.act("/queues/pause", url.Values{"queue": {"later"}, "ahead": {"1"}}), http.StatusSeeOther)
	if q, err := f.client.QueueGet(ctx, "later"); err != nil || !q.Paused {
		t.Errorf("a queue paused ahead from the dashboard: %+v %v", q, err)
	}

	// Schedules.
	wantStatus(t, "schedule pause", b.act("/schedules/pause", url.Values{"schedule": {"nightly"}}), http.StatusSeeOther)
	s, err := f.client.ScheduleGet(ctx, "nightly")
	must(t, err)
	if s.Enabled {
		t.Error("schedule still enabled")
	}
	if r := b.get("/schedules"); testids(r.body, "schedule-resume") != 1 || testids(r.body, "schedule-pause") != 0 {
		t.Errorf("paused schedule's buttons")
	}
	wantStatus(t, "schedule resume", b.act("/schedules/resume", url.Values{"schedule": {"nightly"}}), http.StatusSeeOther)
	r = b.act("/schedules/trigger", url.Values{"schedule": {"nightly"}})
	wantStatus(t, "schedule trigger", r, http.StatusSeeOther)
	m := regexp.MustCompile(`^/jobs/([0-9a-f-]{36})\?`).FindStringSubmatch(r.header.Get("Location"))
	if m == nil {
		t.Fatalf("trigger redirects to %q", r.header.Get("Location"))
	}
	if j, err := f.client.JobGet(ctx, m[1]); err != nil || j.Kind != "build_report" {
		t.Errorf("triggered job: %v %v", j, err)
	}
	wantStatus(t, "trigger a missing schedule", b.act("/schedules/trigger", url.Values{"schedule": {"nope"}}), http.StatusNotFound)

	// Outbox.
	dead := f.events[outbox.StateDead]
	if r := b.get("/outbox/" + dead); testids(r.body, "event-requeue") != 1 {
		t.Errorf("dead event has no requeue button")
	}
	wantStatus(t, "requeue", b.act("/outbox/"+dead+"/requeue", nil), http.StatusSeeOther)
	rec, err := f.ob.Admin().Get(ctx, f.client.Pool(), dead)
	must(t, err)
	if rec.DeadAt != nil {
		t.Error("requeued event still dead")
	}
	wantStatus(t, "requeue a live event", b.act("/outbox/"+dead+"/requeue", nil), http.StatusNotFound)
}

func TestActionsRefusedWhenNotAuthorised(t *testing.T) {
	t.Parallel()
	f := seed(t)
	failed, dead := f.jobs[skiplock.StateFailed], f.events[outbox.StateDead]
	posts := map[string]url.Values{
		"/jobs/" + failed + "/retry":                         nil,
		"/jobs/" + failed + "/delete":                        nil,
		"/jobs/" + f.jobs[skiplock.StatePending] + "/cancel": nil,
		"/jobs/bulk":                   {"action": {"retry"}},
		"/queues/pause":                {"queue": {"mail"}},
		"/queues/resume":               {"queue": {"paused"}},
		"/schedules/pause":             {"schedule": {"nightly"}},
		"/schedules/trigger":           {"schedule": {"nightly"}},
		"/outbox/" + dead + "/requeue": nil,
		"/outbox/requeue-dead":         nil,
	}
	for name, authorize := range map[string]func(*http.Request, string) bool{
		"nil":            nil,
		"only payloads":  func(_ *http.Request, a string) bool { return a == dashboard.ActionViewPayloads },
		"no to all asks": func(*http.Request, string) bool { return false },
	} {
		b := serve(t, f.handler(dashboard.Options{Authorize: authorize}), "", false)
		for path, form := range posts {
			wantStatus(t, name+": POST "+path, b.act(path, form), http.StatusForbidden)
		}
		for _, path := range []string{"/jobs/bulk?action=retry", "/outbox/requeue-dead"} {
			wantStatus(t, name+": GET "+path, b.get(path), http.StatusForbidden)
		}
		for path := range f.pages() {
			r := b.get(path)
			for _, id := range []string{"action-retry", "action-cancel", "action-delete", "queue-pause", "queue-resume",
				"schedule-pause", "schedule-trigger", "event-requeue", "bulk-retry", "bulk-delete", "outbox-requeue-dead"} {
				if testids(r.body, id) != 0 {
					t.Errorf("%s: %s shows %s", name, path, id)
				}
			}
		}
	}
	j, err := f.client.JobGet(context.Background(), failed)
	must(t, err)
	if j.State != skiplock.StateFailed {
		t.Errorf("refused retry changed the job: %s", j.State)
	}
	// An application may allow some actions and not others.
	b := serve(t, f.handler(dashboard.Options{Authorize: func(_ *http.Request, a string) bool { return a == dashboard.ActionJobRetry }}), "", false)
	r := b.get("/jobs/" + failed)
	if testids(r.body, "action-retry") != 1 || testids(r.body, "action-delete") != 0 || testids(r.body, "read-only") != 0 {
		t.Errorf("retry-only viewer's buttons:\n%s", r.body)
	}
	wantStatus(t, "retry-only: delete", b.act("/jobs/"+failed+"/delete", nil), http.StatusForbidden)
	wantStatus(t, "retry-only: bulk retry", b.act("/jobs/bulk", url.Values{"action": {"retry"}}), http.StatusForbidden)
	wantStatus(t, "retry-only: retry", b.act("/jobs/"+failed+"/retry", nil), http.StatusSeeOther)
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	path := "/queues/pause"
	form := func(token string) url.Values {
		v := url.Values{"queue": {"mail"}}
		if token != "" {
			v.Set("csrf", token)
		}
		return v
	}
	// No session cookie at all.
	wantStatus(t, "no session", b.post(path, form("")), http.StatusForbidden)
	token := b.csrf()
	wantStatus(t, "no token", b.post(path, form("")), http.StatusForbidden)
	wantStatus(t, "a wrong token", b.post(path, form(strings.Repeat("0", len(token)))), http.StatusForbidden)
	// Another browser's token (another session) does not work in this one.
	other := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	wantStatus(t, "another session's token", b.post(path, form(other.csrf())), http.StatusForbidden)
	// The right token from another site.
	wantStatus(t, "cross-site", b.post(path, form(token), "Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
	wantStatus(t, "foreign origin", b.post(path, form(token), "Origin", "https://evil.example"), http.StatusForbidden)
	qs, err := f.client.QueueList(context.Background())
	must(t, err)
	for _, q := range qs {
		if q.Name == "mail" {
			t.Fatal("a refused POST paused the queue")
		}
	}
	wantStatus(t, "the right token", b.post(path, form(token), "Sec-Fetch-Site", "same-origin"), http.StatusSeeOther)
	// A token made with another key (another process, no shared CSRFKey) is refused;
	// a shared key makes tokens valid across replicas.
	key := []byte("0123456789abcdef0123456789abcdef")
	b1 := serve(t, f.handler(dashboard.Options{Authorize: allowAll, CSRFKey: key}), "", false)
	b2 := serve(t, f.handler(dashboard.Options{Authorize: allowAll, CSRFKey: key}), "", false)
	tok := b1.csrf()
	u1, _ := url.Parse(b1.srv.URL)
	u2, _ := url.Parse(b2.srv.URL)
	b2.c.Jar.SetCookies(u2, b1.c.Jar.Cookies(u1))
	wantStatus(t, "shared key", b2.post("/queues/resume", url.Values{"queue": {"mail"}, "csrf": {tok}}), http.StatusSeeOther)
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	for _, path := range []string{"/", "/jobs", "/static/dashboard.js", "/nope", "/jobs/nope"} {
		r := b.get(path)
		csp := r.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q allows inline code", path, csp)
		}
		if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q", path, r.header.Get("X-Frame-Options"), r.header.Get("X-Content-Type-Options"))
		}
	}
	// Nothing inline for the CSP to block: no <script> body, no style attribute or element, no on* handler.
	for path := range f.pages() {
		body := b.get(path).body
		for _, re := range []string{`<script[^>]*>[^<]`, `\sstyle=`, `<style`, `\son[a-z]+=`, `javascript:`} {
			if regexp.MustCompile(re).MatchString(body) {
				t.Errorf("%s: inline code or style (%s)", path, re)
			}
		}
	}
	// The session cookie is HttpOnly and SameSite=Strict.
	r := serve(t, f.handler(dashboard.Options{}), "", false).get("/")
	if c := r.header.Get("Set-Cookie"); !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "SameSite=Strict") {
		t.Errorf("session cookie: %q", c)
	}
}

func TestBulkConfirmFlow(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	// Three failed jobs in bulk, one in other.
	for _, q := range []string{"bulk", "bulk", "bulk", "other"} {
		res, err := f.client.EnqueueRaw(ctx, "send_email", []byte(`{}`), &skiplock.EnqueueOpts{Queue: q})
		must(t, err)
		jobs, err := f.client.Manual().Claim(ctx, q, 1)
		must(t, err)
		if len(jobs) != 1 || jobs[0].ID != res.ID {
			t.Fatalf("claimed %v", jobs)
		}
		must(t, f.client.Manual().Fail(ctx, jobs[0], context.Canceled))
	}
	// The jobs page links to the confirmation, with its filter.
	r := b.get("/jobs?queue=bulk&state=failed")
	m := regexp.MustCompile(`href="([^"]+)" data-testid="bulk-retry"`).FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no bulk-retry link:\n%s", r.body)
	}
	link := strings.ReplaceAll(m[1], "&amp;", "&")
	r = b.get(strings.TrimPrefix(link, b.base))
	wantStatus(t, "confirm", r, http.StatusOK)
	count := regexp.MustCompile(`data-testid="bulk-count">(\d+)<`).FindStringSubmatch(r.body)
	if count == nil || count[1] != "3" {
		t.Fatalf("confirm count %v, want 3\n%s", count, r.body)
	}
	// The confirmation's form, as a browser submits it.
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`).FindAllStringSubmatch(r.body, -1) {
		form.Set(m[1], m[2])
	}
	if form.Get("action") != "retry" || form.Get("queue") != "bulk" || form.Get("state") != "failed" || form.Get("csrf") == "" {
		t.Fatalf("confirm form: %v", form)
	}
	r = b.post("/jobs/bulk", form)
	wantStatus(t, "bulk retry", r, http.StatusSeeOther)
	loc, err := url.Parse(r.header.Get("Location"))
	must(t, err)
	if loc.Path != "/jobs" || loc.Query().Get("n") != "3" || loc.Query().Get("queue") != "bulk" {
		t.Errorf("bulk retry redirects to %s", loc)
	}
	if r := b.get("/jobs?" + loc.RawQuery); !strings.Contains(r.body, "Retried 3 jobs.") {
		t.Errorf("no flash after the bulk retry")
	}
	list, err := f.client.JobList(ctx, skiplock.ListParams{States: []skiplock.JobState{skiplock.StateFailed}})
	must(t, err)
	if len(list) != 2 || list[0].Queue != "mail" || list[1].Queue != "other" {
		t.Errorf("failed jobs left: %d (want the fixture's and the one in other)", len(list))
	}

	// A bulk delete leaves alone jobs enqueued after its confirmation.
	r = b.get("/jobs/bulk?action=delete&state=pending&queue=mail")
	form = url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`).FindAllStringSubmatch(r.body, -1) {
		form.Set(m[1], m[2])
	}
	if form.Get("last") == "" {
		t.Fatalf("no bound on the delete: %v", form)
	}
	late, err := f.client.EnqueueRaw(ctx, "send_email", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"})
	must(t, err)
	wantStatus(t, "bulk delete", b.post("/jobs/bulk", form), http.StatusSeeOther)
	pending, err := f.client.JobList(ctx, skiplock.ListParams{States: []skiplock.JobState{skiplock.StatePending}, Queue: "mail"})
	must(t, err)
	if len(pending) != 1 || pending[0].ID != late.ID {
		t.Errorf("pending in mail after the bulk delete: %d jobs, want only the late one", len(pending))
	}

	// A filter whose states the action does not apply to matches nothing: no submit.
	r = b.get("/jobs/bulk?action=retry&state=running")
	if c := regexp.MustCompile(`data-testid="bulk-count">(\d+)<`).FindStringSubmatch(r.body); c == nil || c[1] != "0" || testids(r.body, "bulk-submit") != 0 {
		t.Errorf("retry of running jobs: %v", c)
	}
	wantStatus(t, "unknown bulk action", b.get("/jobs/bulk?action=explode"), http.StatusBadRequest)

	// Requeue every dead event, through its confirmation.
	r = b.get("/outbox?state=dead")
	if testids(r.body, "outbox-requeue-dead") != 1 {
		t.Fatal("no requeue-dead link")
	}
	r = b.get("/outbox/requeue-dead")
	if c := regexp.MustCompile(`data-testid="bulk-count">(\d+)<`).FindStringSubmatch(r.body); c == nil || c[1] != "1" {
		t.Errorf("requeue-dead count: %v", c)
	}
	r = b.act("/outbox/requeue-dead", nil)
	wantStatus(t, "requeue dead", r, http.StatusSeeOther)
	counts, err := f.ob.Admin().Count(ctx, f.client.Pool())
	must(t, err)
	if counts.Dead != 0 {
		t.Errorf("%d dead events left", counts.Dead)
	}
}

func TestRedactPayloads(t *testing.T) {
	t.Parallel()
	f := seed(t)
	pending, dead := f.jobs[skiplock.StatePending], f.events[outbox.StateDead]
	paths := []string{"/jobs/" + pending, "/outbox/" + dead, "/schedules"}
	viewer := serve(t, f.handler(dashboard.Options{RedactPayloads: true}), "", false)
	for _, p := range paths {
		r := viewer.get(p)
		wantStatus(t, p, r, http.StatusOK)
		if strings.Contains(r.body, secret) || !strings.Contains(r.body, "redacted") {
			t.Errorf("%s: payload not redacted for an unauthorised viewer", p)
		}
	}
	// Searching the arguments would reveal them too.
	wantStatus(t, "search", viewer.get("/jobs?q=dee"), http.StatusForbidden)
	admin := serve(t, f.handler(dashboard.Options{RedactPayloads: true,
		Authorize: func(_ *http.Request, a string) bool { return a == dashboard.ActionViewPayloads }}), "", false)
	for _, p := range paths {
		if r := admin.get(p); !strings.Contains(r.body, secret) {
			t.Errorf("%s: payload hidden from an authorised viewer", p)
		}
	}
	// Without RedactPayloads everyone sees payloads, pretty-printed.
	plain := serve(t, f.handler(dashboard.Options{}), "", false)
	if r := plain.get("/jobs/" + pending); !strings.Contains(r.body, "{\n  &#34;to&#34;: &#34;dee@example.com&#34;") {
		t.Errorf("arguments not pretty-printed:\n%s", r.body)
	}
}

// The dashboard works mounted under a prefix, with http.StripPrefix or with
// Options.BasePath: its links, assets, forms and cookie all carry the prefix.
func TestMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	f := seed(t)
	for _, tc := range []struct {
		name  string
		opts  dashboard.Options
		strip bool
	}{
		{"StripPrefix", dashboard.Options{Authorize: allowAll}, true},
		{"BasePath", dashboard.Options{Authorize: allowAll, BasePath: "/admin/jobs/"}, false},
		{"BasePath and StripPrefix", dashboard.Options{Authorize: allowAll, BasePath: "/admin/jobs"}, true},
	} {
		b := serve(t, f.handler(tc.opts), "/admin/jobs", tc.strip)
		r := b.get("/")
		wantStatus(t, tc.name, r, http.StatusOK)
		for _, want := range []string{`href="/admin/jobs/jobs"`, `href="/admin/jobs/static/dashboard.css?v=`, `src="/admin/jobs/static/dashboard.js?v=`} {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s: no %s", tc.name, want)
			}
		}
		if c := r.header.Get("Set-Cookie"); !strings.Contains(c, "Path=/admin/jobs/") {
			t.Errorf("%s: cookie %q", tc.name, c)
		}
		wantStatus(t, tc.name+" asset", b.get("/static/dashboard.css"), http.StatusOK)
		r = b.get("/jobs/" + f.jobs[skiplock.StateFailed])
		if !strings.Contains(r.body, `action="/admin/jobs/jobs/`+f.jobs[skiplock.StateFailed]+`/retry"`) {
			t.Errorf("%s: retry form's action", tc.name)
		}
		r = b.act("/queues/pause", url.Values{"queue": {"mail"}})
		wantStatus(t, tc.name+" pause", r, http.StatusSeeOther)
		if loc := r.header.Get("Location"); !strings.HasPrefix(loc, "/admin/jobs/queues?") {
			t.Errorf("%s: redirect to %q", tc.name, loc)
		}
		must(t, f.client.QueueResume(context.Background(), "mail"))
	}
	// With BasePath, a path outside it is not the dashboard's.
	h := f.handler(dashboard.Options{BasePath: "/admin"})
	b := serve(t, h, "", false)
	wantStatus(t, "outside BasePath", b.get("/jobs"), http.StatusNotFound)
	wantStatus(t, "inside BasePath", b.get("/admin/jobs"), http.StatusOK)
	wantStatus(t, "BasePath itself", b.get("/admin"), http.StatusOK)
	wantStatus(t, "a longer name", b.get("/administrator"), http.StatusNotFound)
}

func TestTokenLogin(t *testing.T) {
	t.Parallel()
	f := seed(t)
	const token = "correct-horse-battery"
	b := serve(t, f.handler(dashboard.Options{Token: token, Authorize: allowAll}), "", false)
	r := b.get("/jobs?state=failed")
	wantStatus(t, "no token", r, http.StatusUnauthorized)
	if testids(r.body, "login-form") != 1 || strings.Contains(r.body, f.jobs[skiplock.StateFailed]) {
		t.Fatalf("unauthenticated: no login form, or data shown:\n%s", r.body)
	}
	wantStatus(t, "assets need no token", b.get("/static/dashboard.css"), http.StatusOK)
	wantStatus(t, "bearer", b.get("/jobs", "Authorization", "Bearer "+token), http.StatusOK)
	wantStatus(t, "wrong bearer", b.get("/jobs", "Authorization", "Bearer nope"), http.StatusUnauthorized)

	csrf := csrfField.FindStringSubmatch(r.body)[1]
	r = b.post("/login", url.Values{"csrf": {csrf}, "token": {"nope"}, "next": {"/jobs?state=failed"}})
	wantStatus(t, "wrong token", r, http.StatusUnauthorized)
	if testids(r.body, "login-error") != 1 {
		t.Error("no login-error")
	}
	wantStatus(t, "login without csrf", b.post("/login", url.Values{"token": {token}}), http.StatusForbidden)
	r = b.post("/login", url.Values{"csrf": {csrf}, "token": {token}, "next": {"/jobs?state=failed"}})
	wantStatus(t, "login", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); loc != "/jobs?state=failed" {
		t.Errorf("login redirects to %q", loc)
	}
	r = b.get("/jobs?state=failed")
	wantStatus(t, "after login", r, http.StatusOK)
	if testids(r.body, "logout") != 1 {
		t.Error("no logout button")
	}
	// Actions work with the cookie (and a CSRF token).
	wantStatus(t, "act", b.act("/queues/pause", url.Values{"queue": {"mail"}}), http.StatusSeeOther)
	// Sign out.
	wantStatus(t, "logout", b.act("/logout", nil), http.StatusSeeOther)
	wantStatus(t, "after logout", b.get("/jobs"), http.StatusUnauthorized)

	// Under a prefix, the login form returns to the page asked for.
	ops := serve(t, f.handler(dashboard.Options{Token: token}), "/ops", true)
	r = ops.get("/jobs?state=failed")
	if !strings.Contains(r.body, `name="next" value="/ops/jobs?state=failed"`) {
		t.Errorf("login under a prefix: next\n%s", r.body)
	}
	csrf = csrfField.FindStringSubmatch(r.body)[1]
	r = ops.post("/login", url.Values{"csrf": {csrf}, "token": {token}, "next": {"/ops/jobs?state=failed"}})
	if loc := r.header.Get("Location"); r.code != http.StatusSeeOther || loc != "/ops/jobs?state=failed" {
		t.Errorf("login under a prefix: %d to %q", r.code, loc)
	}

	// next may not leave the dashboard.
	for _, next := range []string{"//evil.example/", "https://evil.example/", "/\\evil.example"} {
		b := serve(t, f.handler(dashboard.Options{Token: token}), "", false)
		r := b.get("/login")
		csrf := csrfField.FindStringSubmatch(r.body)[1]
		r = b.post("/login", url.Values{"csrf": {csrf}, "token": {token}, "next": {next}})
		if loc := r.header.Get("Location"); loc != "/" {
			t.Errorf("next %q: redirect to %q", next, loc)
		}
	}
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{BasicUser: "ops", BasicPassword: "pw"}), "", false)
	r := b.get("/")
	wantStatus(t, "no credentials", r, http.StatusUnauthorized)
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
	}
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/", nil)
	req.SetBasicAuth("ops", "pw")
	wantStatus(t, "right credentials", b.do(req), http.StatusOK)
	req, _ = http.NewRequest(http.MethodGet, b.srv.URL+"/", nil)
	req.SetBasicAuth("ops", "wrong")
	wantStatus(t, "wrong password", b.do(req), http.StatusUnauthorized)
}

// Without an outbox, there are no outbox pages and no outbox on the overview.
func TestNoOutbox(t *testing.T) {
	t.Parallel()
	f := seed(t)
	h, err := dashboard.New(f.client, nil, dashboard.Options{})
	must(t, err)
	b := serve(t, h, "", false)
	r := b.get("/")
	wantStatus(t, "overview", r, http.StatusOK)
	if testids(r.body, "nav-outbox") != 0 || testids(r.body, "outbox-summary") != 0 {
		t.Error("outbox shown without an outbox")
	}
	wantStatus(t, "outbox page", b.get("/outbox"), http.StatusNotFound)
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	f := seed(t)
	for name, opts := range map[string]dashboard.Options{
		"relative BasePath": {BasePath: "admin"},
		"PageSize":          {PageSize: 5000},
		"password only":     {BasicPassword: "x"},
		"short CSRFKey":     {CSRFKey: []byte("short")},
	} {
		if _, err := dashboard.New(f.client, f.ob, opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := dashboard.New(nil, nil, dashboard.Options{}); err == nil {
		t.Error("nil client: no error")
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	req, _ := http.NewRequest(http.MethodDelete, b.srv.URL+"/jobs/"+f.jobs[skiplock.StateFailed], nil)
	wantStatus(t, "DELETE", b.do(req), http.StatusMethodNotAllowed)
	wantStatus(t, "POST to a page", b.act("/jobs", nil), http.StatusMethodNotAllowed)
	req, _ = http.NewRequest(http.MethodHead, b.srv.URL+"/", nil)
	if r := b.do(req); r.code != http.StatusOK || r.body != "" {
		t.Errorf("HEAD: %d, %d bytes", r.code, len(r.body))
	}
}

func TestJobDetail(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	r := b.get("/jobs/" + f.jobs[skiplock.StateSucceeded])
	wantStatus(t, "succeeded job", r, http.StatusOK)
	for _, want := range []string{`data-testid="job-output">{` + "\n" + `  &#34;message_id&#34;: &#34;m-4711&#34;`,
		`data-testid="job-tags"`, `href="/jobs?tag=vip"`, `<th>tenant</th><td class="mono">acme</td>`,
		`data-testid="job-state"><span class="state st-succeeded">succeeded</span>`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("succeeded job: no %s\n%s", want, r.body)
		}
	}
	// The attempt timeline of the failed job.
	r = b.get("/jobs/" + f.jobs[skiplock.StateFailed])
	if testids(r.body, "attempt-row") != 1 || !strings.Contains(r.body, "smtp: mailbox unavailable") || testids(r.body, "job-error") != 1 {
		t.Errorf("failed job: no attempt timeline or error\n%s", r.body)
	}
	if testids(r.body, "job-flow") != 0 {
		t.Errorf("a job outside any flow shows a flow\n%s", r.body)
	}
	// A flow's tree, from a child's page: every job, its state, the page's own job marked.
	res, err := f.client.EnqueueFlow(f.ctx, skiplock.Flow{Kind: "report", Payload: []byte(`{}`),
		Children: []skiplock.Flow{{Kind: "part", Payload: []byte(`{}`)}, {Kind: "part", Payload: []byte(`{}`)}}})
	must(t, err)
	r = b.get("/jobs/" + res.Children[1].ID)
	if testids(r.body, "flow-node") != 3 || !strings.Contains(r.body, `data-state="waiting">report</a>`) ||
		!strings.Contains(r.body, "(2 of 2 children open, on failure: fail)") || !strings.Contains(r.body, "└─ <a href=\"/jobs/"+res.Children[1].ID) ||
		!strings.Contains(r.body, "◀") {
		t.Errorf("child of a flow: no tree\n%s", r.body)
	}
}

func TestRunNow(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	later, err := f.client.EnqueueRaw(ctx, "send_email", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail", Delay: time.Hour})
	must(t, err)
	r := b.get("/jobs/" + later.ID)
	if testids(r.body, "action-run-now") != 1 || !strings.Contains(r.body, "(in 59m") && !strings.Contains(r.body, "(in 1h 0m") {
		t.Fatalf("delayed job: no run-now button or no wait shown\n%s", r.body)
	}
	wantStatus(t, "run now", b.act("/jobs/"+later.ID+"/run_now", nil), http.StatusSeeOther)
	j, err := f.client.JobGet(ctx, later.ID)
	must(t, err)
	if time.Until(j.RunAt) > time.Minute {
		t.Errorf("run_at still %s", j.RunAt)
	}
	wantStatus(t, "run now a failed job", b.act("/jobs/"+f.jobs[skiplock.StateFailed]+"/run_now", nil), http.StatusConflict)
	// In bulk.
	for range 2 {
		_, err := f.client.EnqueueRaw(ctx, "send_email", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "slow", Delay: time.Hour})
		must(t, err)
	}
	r = b.get("/jobs/bulk?action=run_now&queue=slow")
	if c := regexp.MustCompile(`data-testid="bulk-count">(\d+)<`).FindStringSubmatch(r.body); c == nil || c[1] != "2" {
		t.Fatalf("run-now count: %v", c)
	}
	r = b.act("/jobs/bulk", url.Values{"action": {"run_now"}, "queue": {"slow"}})
	wantStatus(t, "bulk run now", r, http.StatusSeeOther)
	s, err := f.client.Stats(ctx, nil)
	must(t, err)
	if due := s.Queue("slow").Due; due != 2 {
		t.Errorf("slow: %d due after a bulk run now", due)
	}
}

// One transaction's jobs and events, from either's page.
func TestLineage(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	tx, err := f.client.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	res, err := f.client.EnqueueRawTx(ctx, tx, "send_email", []byte(`{"order":7}`), &skiplock.EnqueueOpts{Queue: "mail"})
	must(t, err)
	res2, err := f.client.EnqueueRawTx(ctx, tx, "build_report", []byte(`{"order":7}`), &skiplock.EnqueueOpts{Queue: "reports"})
	must(t, err)
	ev, err := f.ob.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "7", EventType: "order.created", Payload: []byte(`{}`)})
	must(t, err)
	must(t, tx.Commit(ctx))
	j, err := f.client.JobGet(ctx, res.ID)
	must(t, err)
	if j.TxID == 0 {
		t.Fatal("no txid recorded")
	}
	r := b.get("/jobs/" + res.ID)
	m := regexp.MustCompile(`href="(/tx/\d+)\?job=` + res.ID + `" data-testid="job-lineage"`).FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no lineage link\n%s", r.body)
	}
	if r := b.get("/outbox/" + ev); !strings.Contains(r.body, `href="`+m[1]+`" data-testid="event-lineage"`) {
		t.Errorf("the event links elsewhere or nowhere")
	}
	r = b.get(m[1] + "?job=" + res.ID)
	wantStatus(t, "lineage", r, http.StatusOK)
	for _, id := range []string{`data-job-id="` + res.ID, `data-job-id="` + res2.ID, `data-event-id="` + ev} {
		if !strings.Contains(r.body, id) {
			t.Errorf("lineage lacks %s", id)
		}
	}
	if testids(r.body, "job-row") != 2 || testids(r.body, "event-row") != 1 {
		t.Errorf("lineage: %d jobs, %d events", testids(r.body, "job-row"), testids(r.body, "event-row"))
	}
	if r := b.get(m[1]); testids(r.body, "job-row") != 2 || testids(r.body, "event-row") != 1 {
		t.Errorf("lineage without the job hint: %d jobs, %d events", testids(r.body, "job-row"), testids(r.body, "event-row"))
	}

	// A job enqueued alone (its own transaction) records no lineage: its page's link
	// names it, and the lineage page shows it, only under its own transaction.
	alone, err := f.client.EnqueueRaw(ctx, "send_email", []byte(`{"order":8}`), nil)
	must(t, err)
	r = b.get("/jobs/" + alone.ID)
	m = regexp.MustCompile(`href="(/tx/\d+)\?job=` + alone.ID + `" data-testid="job-lineage"`).FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no lineage link on a lone job's page\n%s", r.body)
	}
	r = b.get(m[1] + "?job=" + alone.ID)
	wantStatus(t, "lone lineage", r, http.StatusOK)
	if testids(r.body, "job-row") != 1 || !strings.Contains(r.body, `data-job-id="`+alone.ID) {
		t.Errorf("lineage of a lone job: %d job rows\n%s", testids(r.body, "job-row"), r.body)
	}
	if r := b.get("/tx/1?job=" + alone.ID); r.code != http.StatusOK || testids(r.body, "job-row") != 0 {
		t.Errorf("a job hint under another transaction: %d, %d job rows", r.code, testids(r.body, "job-row"))
	}
	wantStatus(t, "bad job hint", b.get(m[1]+"?job=x"), http.StatusBadRequest)
	wantStatus(t, "bad txid", b.get("/tx/x"), http.StatusBadRequest)
	if r := b.get("/tx/1"); r.code != http.StatusOK || testids(r.body, "job-row") != 0 {
		t.Errorf("an unknown txid: %d", r.code)
	}
}

// The throughput chart counts the jobs that finished in the last hour.
func TestThroughputChart(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	r := b.get("/")
	// The figures of a chart's bars, summed by series (the seed may straddle buckets).
	sums := func(id string) map[string]int {
		chart := regexp.MustCompile(`(?s)<svg class="chart" data-testid="` + id + `".*?</svg>`).FindString(r.body)
		if chart == "" {
			t.Fatalf("no %s", id)
		}
		out := map[string]int{}
		for _, m := range regexp.MustCompile(`(\d+) (succeeded|failed|cancelled)`).FindAllStringSubmatch(chart, -1) {
			n, _ := strconv.Atoi(m[1])
			out[m[2]] += n
		}
		if bars := strings.Count(chart, `<g class="bar">`); bars != 13 {
			t.Errorf("%s: %d bars, want 13", id, bars)
		}
		return out
	}
	if got := sums("chart-throughput"); got["succeeded"] != 1 || len(got) != 1 {
		t.Errorf("throughput chart: %v", got)
	}
	if got := sums("chart-failures"); got["failed"] != 1 || got["cancelled"] != 1 || len(got) != 2 {
		t.Errorf("failures chart: %v", got)
	}
	if !strings.Contains(r.body, `aria-label="mail: 1 succeeded, 1 failed in the last hour"`) {
		t.Errorf("no sparkline for mail")
	}
}

// TestBulkOnSelectedJobs: the job list's checkboxes name jobs for a bulk action; the
// confirmation counts them and its form carries them and the CSRF token; a selected
// job the action does not apply to is skipped. Without the bulk permission there are
// no checkboxes and the action is refused.
func TestBulkOnSelectedJobs(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	r := b.get("/jobs")
	if testids(r.body, "job-select") != 8 || testids(r.body, "selected-bulk-retry") != 1 {
		t.Fatalf("%d checkboxes, %d retry-selected buttons; want 8 and 1", testids(r.body, "job-select"), testids(r.body, "selected-bulk-retry"))
	}
	failed, cancelled, pending := f.jobs[skiplock.StateFailed], f.jobs[skiplock.StateCancelled], f.jobs[skiplock.StatePending]
	r = b.get("/jobs/bulk?action=retry&id=" + failed + "&id=" + cancelled + "&id=" + pending)
	wantStatus(t, "confirm selected", r, http.StatusOK)
	if c := regexp.MustCompile(`data-testid="bulk-count">(\d+)<`).FindStringSubmatch(r.body); c == nil || c[1] != "3" {
		t.Fatalf("confirm count %v, want 3", c)
	}
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)"`).FindAllStringSubmatch(r.body, -1) {
		form.Add(m[1], m[2])
	}
	if len(form["id"]) != 3 || form.Get("csrf") == "" || form.Get("action") != "retry" {
		t.Fatalf("confirm form: %v", form)
	}
	noToken := url.Values{"action": form["action"], "id": form["id"]}
	wantStatus(t, "without the token", b.post("/jobs/bulk", noToken), http.StatusForbidden)
	r = b.post("/jobs/bulk", form)
	wantStatus(t, "retry selected", r, http.StatusSeeOther)
	loc, err := url.Parse(r.header.Get("Location"))
	must(t, err)
	if loc.Query().Get("n") != "2" || loc.Query().Get("skipped") != "1" {
		t.Errorf("retry selected redirects to %s, want 2 done and 1 skipped", loc)
	}
	for _, id := range []string{failed, cancelled} {
		j, err := f.client.JobGet(f.ctx, id)
		must(t, err)
		if j.State != skiplock.StatePending {
			t.Errorf("%s is %s after the retry, want pending", id, j.State)
		}
	}
	wantStatus(t, "a bad id", b.get("/jobs/bulk?action=retry&id=nope"), http.StatusBadRequest)

	viewer := serve(t, f.handler(dashboard.Options{}), "", false)
	if r := viewer.get("/jobs"); testids(r.body, "job-select") != 0 {
		t.Errorf("a read-only viewer sees checkboxes")
	}
	wantStatus(t, "read-only", viewer.get("/jobs/bulk?action=retry&id="+failed), http.StatusForbidden)
}

// TestBatchesFlowsLimits: the batches page lists a batch with its callback, the flows
// page the waiting callback, and the limits page sets and deletes a limit for those
// allowed (with the CSRF token), while a viewer without the permission gets 403.
func TestBatchesFlowsLimits(t *testing.T) {
	t.Parallel()
	f := seed(t)
	id, err := f.client.BatchOpen(f.ctx, skiplock.Batch{Description: "nightly <export>",
		OnComplete: &skiplock.EnqueueParams{Kind: "report_ready", Payload: []byte(`{}`)}})
	must(t, err)
	info, err := f.client.BatchGet(f.ctx, id)
	must(t, err)
	b := serve(t, f.handler(dashboard.Options{Authorize: allowAll}), "", false)
	r := b.get("/batches")
	wantStatus(t, "batches", r, http.StatusOK)
	if !strings.Contains(r.body, `data-batch-id="`+id+`"`) || !strings.Contains(r.body, "nightly &lt;export&gt;") ||
		!strings.Contains(r.body, `href="/jobs/`+info.OnComplete+`" data-testid="batch-on-complete"`) {
		t.Errorf("batches: the batch, its escaped description or its callback is missing:\n%s", r.body)
	}
	r = b.get("/flows")
	wantStatus(t, "flows", r, http.StatusOK)
	if !strings.Contains(r.body, `data-job-id="`+info.OnComplete+`"`) {
		t.Errorf("flows: the waiting callback %s is not listed", info.OnComplete)
	}
	wantStatus(t, "batches, bad cursor", b.get("/batches?after=nope"), http.StatusBadRequest)
	wantStatus(t, "flows, bad cursor", b.get("/flows?after=nope"), http.StatusBadRequest)

	r = b.get("/limits")
	if testids(r.body, "limits-empty") != 1 || testids(r.body, "limit-form") != 1 {
		t.Fatalf("limits: want the empty list and the form")
	}
	set := url.Values{"scope": {"queue"}, "name": {"mail"}, "key": {"*"}, "max_running": {"3"}, "rate": {"10"}, "per": {"1m"}}
	wantStatus(t, "set without the token", b.post("/limits/set", set), http.StatusForbidden)
	wantStatus(t, "set", b.act("/limits/set", set), http.StatusSeeOther)
	limits, err := f.client.LimitList(f.ctx)
	must(t, err)
	if len(limits) != 1 || limits[0].Queue != "mail" || limits[0].MaxRunning != 3 || limits[0].Rate != 10 || limits[0].Per != time.Minute {
		t.Fatalf("limits after set: %+v", limits)
	}
	if r := b.get("/limits"); testids(r.body, "limit-row") != 1 || testids(r.body, "limit-delete") != 1 {
		t.Errorf("limits: the new limit is not listed with its delete button")
	}
	wantStatus(t, "bad number", b.act("/limits/set", url.Values{"scope": {"queue"}, "name": {"mail"}, "max_running": {"x"}}), http.StatusBadRequest)
	viewer := serve(t, f.handler(dashboard.Options{}), "", false)
	if r := viewer.get("/limits"); testids(r.body, "limit-form") != 0 || testids(r.body, "limit-delete") != 0 {
		t.Errorf("a read-only viewer sees the limit controls")
	}
	wantStatus(t, "read-only delete", viewer.act("/limits/delete", url.Values{"scope": {"queue"}, "name": {"mail"}, "key": {"*"}}), http.StatusForbidden)
	wantStatus(t, "delete", b.act("/limits/delete", url.Values{"scope": {"queue"}, "name": {"mail"}, "key": {"*"}}), http.StatusSeeOther)
	if limits, err := f.client.LimitList(f.ctx); err != nil || len(limits) != 0 {
		t.Errorf("limits after delete: %+v, %v", limits, err)
	}
}

// TestQueuesListsIdleQueues: a queue only the client's configuration names is listed,
// and any queue can be paused by name before it has a job.
func TestQueuesListsIdleQueues(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ws := skiplock.NewWorkers()
	ws.AddHandler("noop", func(context.Context, *skiplock.Job) error { return nil }, nil)
	c, err := skiplock.NewClient(f.client.Pool(), skiplock.Config{Schema: f.client.Schema(), Workers: ws,
		Queues: map[string]skiplock.QueueConfig{"configured": {MaxWorkers: 1}}})
	must(t, err)
	h, err := dashboard.New(c, f.ob, dashboard.Options{Authorize: allowAll})
	must(t, err)
	b := serve(t, h, "", false)
	if r := b.get("/queues"); !strings.Contains(r.body, `data-queue="configured"`) || testids(r.body, "queue-pause-form") != 1 {
		t.Errorf("queues: the configured queue or the pause-by-name form is missing")
	}
	wantStatus(t, "pause ahead", b.act("/queues/pause", url.Values{"queue": {"nightly"}, "ahead": {"1"}}), http.StatusSeeOther)
	if r := b.get("/queues"); !strings.Contains(r.body, `data-queue="nightly"`) {
		t.Errorf("queues: the queue paused ahead of its first job is not listed")
	}
}

// TestFairPage: the fair queues page lists each fair queue with its keys (escaped),
// their due jobs and weights, and says so when no queue is fair.
func TestFairPage(t *testing.T) {
	t.Parallel()
	f := seed(t)
	b := serve(t, f.handler(dashboard.Options{}), "", false)
	if r := b.get("/fair"); testids(r.body, "fair-empty") != 1 {
		t.Fatalf("fair: want the empty page:\n%s", r.body)
	}
	for key, n := range map[string]int{"<acme>": 3, "globex": 1} {
		for range n {
			_, err := f.client.EnqueueRaw(f.ctx, "k", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "tenants", ConcurrencyKey: key})
			must(t, err)
		}
	}
	must(t, f.client.QueueSetFair(f.ctx, "tenants", nil))
	must(t, f.client.FairWeightSet(f.ctx, "tenants", "globex", 4))
	r := b.get("/fair")
	wantStatus(t, "fair", r, http.StatusOK)
	if testids(r.body, "fair-queue") != 1 || testids(r.body, "fair-key") != 2 ||
		!strings.Contains(r.body, `data-key="&lt;acme&gt;"`) || !strings.Contains(r.body, `<td class="num">4</td>`) {
		t.Fatalf("fair: want queue tenants with its two keys and globex's weight:\n%s", r.body)
	}
	wantStatus(t, "fair, POST", b.act("/fair", url.Values{}), http.StatusMethodNotAllowed)
}
