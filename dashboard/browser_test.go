package dashboard_test

// The dashboard as a person uses it: a headless Chromium (chromedp) loads every page
// of a seeded schema, filters, clicks, answers the confirm dialogs, and watches the
// live refresh. Needs Debian's chromium (scripts/deps.sh installs it); without it
// these tests are skipped, loudly, unless SKIPLOCK_REQUIRE_BROWSER=1 (CI), which
// makes that a failure. Screenshots of every page land in testdata/screenshots/.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/skiplocktest"
)

// TestBrowser starts one Chromium and runs the scenarios in parallel, each in its
// own tab (own cookies) against its own seeded schema and server.
func TestBrowser(t *testing.T) {
	t.Parallel()
	browserCtx := startBrowser(t)
	t.Run("Pages", func(t *testing.T) { t.Parallel(); browserPages(t, browserCtx) })
	t.Run("RetryFailedJob", func(t *testing.T) { t.Parallel(); browserRetry(t, browserCtx) })
	t.Run("CancelAsksFirst", func(t *testing.T) { t.Parallel(); browserCancelConfirm(t, browserCtx) })
	t.Run("BulkCancel", func(t *testing.T) { t.Parallel(); browserBulkCancel(t, browserCtx) })
	t.Run("CSRF", func(t *testing.T) { t.Parallel(); browserCSRF(t, browserCtx) })
	t.Run("ReadOnly", func(t *testing.T) { t.Parallel(); browserReadOnly(t, browserCtx) })
	t.Run("Widths", func(t *testing.T) { t.Parallel(); browserWidths(t, browserCtx) })
	t.Run("SelectionHoldsRefresh", func(t *testing.T) { t.Parallel(); browserSelection(t, browserCtx) })
}

// browserSelection: on the newest-first list a ticked box stays on its job while new
// jobs arrive (the live refresh waits, saying so, instead of patching rows by
// position, which slid the tick onto the new job), the bulk button posts the
// selected job through its confirmation, and once the selection is cleared the
// refresh brings the new job in.
func browserSelection(t *testing.T, browserCtx context.Context) {
	f := seed(t)
	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll, RefreshInterval: time.Second}))
	b := newTab(t, browserCtx, srv.URL)
	b.open("/jobs", http.StatusOK)
	first := `document.querySelector('[data-testid="job-select"]')`
	picked := eval[string](b, first+`.value`)
	b.run("tick the first job", chromedp.Click(tid("job-select")))
	res, err := f.client.EnqueueRaw(f.ctx, "send_email", []byte(`{}`), &skiplock.EnqueueOpts{Queue: "mail"})
	must(t, err)
	b.waitFor("the refresh to wait for the selection",
		`document.querySelector('[data-testid="live-status"]').textContent.includes("selected")`, 30*time.Second)
	if v, on := eval[string](b, first+`.value`), eval[bool](b, first+`.checked`); v != picked || !on {
		t.Errorf("the first box is on %s (ticked %v), want still %s ticked", v, on, picked)
	}
	if b.count("job-row") != 8 {
		t.Errorf("the list changed while a job was selected: %d rows", b.count("job-row"))
	}
	b.run("untick it", chromedp.Click(tid("job-select")))
	b.waitFor("the new job after a refresh", fmt.Sprintf(
		`document.querySelector('[data-job-id=%q]') !== null`, res.ID), 30*time.Second)
	b.run("tick the job picked before", chromedp.Click(fmt.Sprintf(`input[data-testid="job-select"][value=%q]`, picked)))
	b.click(tid("selected-bulk-run-now"), http.StatusOK)
	if n := b.text("bulk-count"); n != "1" {
		t.Errorf("the confirmation counts %s selected jobs, want 1", n)
	}
	if id := eval[string](b, `document.querySelector('input[type="hidden"][name="id"]').value`); id != picked {
		t.Errorf("the confirmation names %s, want %s", id, picked)
	}
}

// browserWidths loads every list page (and a job and the lineage) in a 390 px wide
// viewport (a phone) and a 1,440 px one, and fails when the page is wider than the
// viewport: a table that overflowed hid its rows' state, error and actions off to
// the right. It takes a full-page screenshot of each (narrow-*.png, wide-*.png).
func browserWidths(t *testing.T, browserCtx context.Context) {
	f := seedRich(t)
	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll}))
	pages := map[string]string{
		"overview": "/", "jobs": "/jobs", "jobs-failed": "/jobs?state=failed", "queues": "/queues",
		"schedules": "/schedules", "outbox": "/outbox?state=dead", "job": "/jobs/" + f.webhook,
		"lineage": "/tx/" + strconv.FormatInt(f.lineageTx, 10), "event": "/outbox/" + f.events[outbox.StateDead],
		"batches": "/batches", "limits": "/limits", "flows": "/flows", "fair": "/fair",
	}
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"narrow", 390, 844}, {"wide", 1440, 900}} {
		b := newTab(t, browserCtx, srv.URL)
		b.run("viewport", chromedp.EmulateViewport(size.width, size.height))
		for name, path := range pages {
			b.open(path, http.StatusOK)
			if w, inner := eval[int](b, `document.documentElement.scrollWidth`), eval[int](b, `window.innerWidth`); w > inner || inner != int(size.width) {
				t.Errorf("%s at %d px: the page is %d px wide in a viewport of %d", path, size.width, w, inner)
			}
			b.shotPage(size.name + "-" + name)
		}
	}
}

// richFixture is the fixture of seed with more to look at: a job that failed all its
// attempts (a timeline of three), one transaction that wrote two jobs and an event,
// and a thousand jobs finished over the last hour (the charts).
type richFixture struct {
	*fixture
	webhook   string // the job that failed three attempts
	lineageTx int64  // the transaction of the order: two jobs and an event
	orderJob  string // one of its jobs
}

func seedRich(t *testing.T) *richFixture {
	t.Helper()
	f := &richFixture{fixture: seed(t)}
	ctx, c := f.ctx, f.client

	// A webhook that fails three times: the attempt timeline.
	res, err := c.EnqueueRaw(ctx, "deliver_webhook", []byte(`{"url":"https://hooks.example.com/orders","order":4711}`),
		&skiplock.EnqueueOpts{Queue: "webhooks", MaxAttempts: 3, Tags: []string{"orders", "eu"},
			Metadata: map[string]string{"tenant": "acme", "request_id": "req-8d1f"}})
	must(t, err)
	f.webhook = res.ID
	for attempt := 1; attempt <= 3; attempt++ {
		jobs, err := c.Manual().Claim(ctx, "webhooks", 1)
		must(t, err)
		if len(jobs) != 1 {
			t.Fatalf("attempt %d: claimed %d jobs", attempt, len(jobs))
		}
		// Retried at once (no backoff), until its attempts run out.
		st, err := c.Manual().Retry(ctx, jobs[0], fmt.Errorf("POST https://hooks.example.com/orders: 502 Bad Gateway (attempt %d)", attempt), 0)
		must(t, err)
		if want := map[bool]skiplock.JobState{true: skiplock.StateFailed, false: skiplock.StatePending}[attempt == 3]; st != want {
			t.Fatalf("attempt %d: the job is %s, want %s", attempt, st, want)
		}
	}

	// One business transaction: a receipt, an invoice and the order's event.
	tx, err := c.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	r1, err := c.EnqueueRawTx(ctx, tx, "send_email", []byte(`{"to":"eve@example.com","template":"receipt"}`),
		&skiplock.EnqueueOpts{Queue: "mail", Tags: []string{"order-1001"}})
	must(t, err)
	_, err = c.EnqueueRawTx(ctx, tx, "build_report", []byte(`{"invoice":1001}`), &skiplock.EnqueueOpts{Queue: "reports", Tags: []string{"order-1001"}})
	must(t, err)
	_, err = f.ob.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "1001", EventType: "order.placed",
		Payload: []byte(`{"order":1001,"total":"42.00"}`)})
	must(t, err)
	must(t, tx.Commit(ctx))
	f.orderJob = r1.ID
	j, err := c.JobGet(ctx, r1.ID)
	must(t, err)
	f.lineageTx = j.TxID

	// A thousand jobs finished over the last hour, more of them lately, with a burst
	// of failures half an hour ago.
	jobs := pgx.Identifier{c.Schema(), "jobs"}.Sanitize()
	_, err = c.Pool().Exec(ctx, `INSERT INTO `+jobs+` (queue, kind, payload, status, attempts, last_error, tags, run_at, attempted_at, created_at, updated_at)
SELECT q, (ARRAY['send_email', 'build_report', 'deliver_webhook'])[1 + g % 3], jsonb_build_object('n', g), s::`+pgx.Identifier{c.Schema(), "job_status"}.Sanitize()+`,
       1, CASE s WHEN 'failed' THEN 'smtp: 421 too many connections' WHEN 'cancelled' THEN 'cancelled by an operator' END,
       CASE WHEN g % 7 = 0 THEN ARRAY['vip'] END, at - interval '3 seconds', at - interval '2 seconds', at - interval '3 seconds', at
FROM (SELECT g, (ARRAY['mail', 'reports', 'webhooks'])[1 + g % 3] AS q, at,
             CASE WHEN g % 29 = 0 THEN 'cancelled'
                  WHEN g % 17 = 0 OR (at BETWEEN now() - interval '35 minutes' AND now() - interval '25 minutes' AND g % 3 = 0) THEN 'failed'
                  ELSE 'succeeded' END AS s
      FROM (SELECT g, now() - 3500 * power(g / 1000.0, 1.4) * interval '1 second' AS at FROM generate_series(1, 1000) g) x) y`)
	must(t, err)
	return f
}

// serveBrowser serves h on a real server for the browser.
func serveBrowser(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// browserPages loads every page, checks its key elements, the charts, the script
// and the stylesheet, and takes the screenshots.
func browserPages(t *testing.T, browserCtx context.Context) {
	f := seedRich(t)
	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll, Title: "acme jobs"}))
	b := newTab(t, browserCtx, srv.URL)

	// Overview.
	b.open("/", http.StatusOK)
	b.wantIDs("overview", "overview", "nav-overview", "nav-jobs", "nav-queues", "nav-schedules", "nav-outbox",
		"live-region", "queues-table", "queue-row", "queue-name", "queue-pending", "queue-failed", "queue-sparkline",
		"chart-throughput", "chart-failures", "recent-succeeded", "recent-failed", "recent-cancelled",
		"outbox-summary", "outbox-lag", "outbox-unpublished", "outbox-dead-count", "schedules-summary",
		"live-toggle") // shown by the script: it ran under the page's CSP
	b.noIDs("overview", "read-only", "error")
	if n, rows := b.count("queue-sparkline"), b.count("queue-row"); n != rows || rows != 5 {
		t.Errorf("overview: %d sparklines for %d queues, want 5 each (idle, mail, paused, reports, webhooks)", n, rows)
	}
	if s := eval[string](b, `document.querySelector('[data-queue="paused"] [data-testid="queue-paused"]').textContent.trim()`); s != "paused" {
		t.Errorf("overview: queue paused shows %q", s)
	}
	// The charts: SVGs laid out with a size, with bars drawn and coloured by the stylesheet.
	type chart struct {
		Width, Height    float64
		Bars, Hits, Ones int
		Fill             string
	}
	chartOf := func(id, class string) chart {
		return eval[chart](b, `(() => { const s = document.querySelector('[data-testid="`+id+`"]'); const r = s.getBoundingClientRect();
			const bars = s.querySelectorAll('g.bar rect.`+class+`');
			return {Width: r.width, Height: r.height, Bars: Array.from(bars).filter(e => +e.getAttribute('height') > 0).length,
				Hits: s.querySelectorAll('g.bar rect.hit title').length, Ones: s.querySelectorAll('g.bar').length,
				Fill: bars.length ? getComputedStyle(bars[0]).fill : ''}; })()`)
	}
	for _, c := range []struct {
		id, class string
		bars      int // at least this many of the 13 buckets have some
	}{{"chart-throughput", "s-succeeded", 10}, {"chart-failures", "s-failed", 8}, {"chart-failures", "s-cancelled", 4}} {
		got := chartOf(c.id, c.class)
		if got.Width < 200 || got.Height < 50 {
			t.Errorf("%s: laid out %vx%v", c.id, got.Width, got.Height)
		}
		if got.Ones != 13 || got.Hits != 13 {
			t.Errorf("%s: %d bars with %d tooltips, want 13 five-minute buckets", c.id, got.Ones, got.Hits)
		}
		if got.Bars < c.bars {
			t.Errorf("%s: %d %s bars drawn, want at least %d of the 13 buckets", c.id, got.Bars, c.class, c.bars)
		}
		if got.Fill == "" || got.Fill == "rgb(0, 0, 0)" {
			t.Errorf("%s: %s bars filled %q: the stylesheet's colour is missing", c.id, c.class, got.Fill)
		}
	}
	if n, _ := strconv.Atoi(b.text("recent-succeeded")); n < 800 {
		t.Errorf("overview: %d succeeded in the last hour, want the ~850 seeded", n)
	}
	b.shot("overview")

	// Jobs, reached from the navigation.
	b.click(tid("nav-jobs"), http.StatusOK)
	b.wantIDs("jobs", "jobs", "jobs-filter", "filter-state", "filter-queue", "filter-kind", "filter-tag", "filter-search",
		"filter-submit", "jobs-table", "job-row", "job-link", "job-row-state", "jobs-next",
		"bulk-retry", "bulk-cancel", "bulk-delete", "bulk-run-now")
	if n := b.count("job-row"); n != 50 {
		t.Errorf("jobs: %d rows, want a page of 50", n)
	}
	b.shot("jobs")
	b.click(tid("jobs-next"), http.StatusOK)
	b.wantIDs("jobs, page 2", "job-row", "jobs-first")

	// A job that failed three attempts, from a filtered list.
	b.open("/jobs?queue=webhooks&state=failed&tag=orders", http.StatusOK)
	if n := b.count("job-row"); n != 1 {
		t.Fatalf("jobs of webhooks tagged orders that failed: %d rows, want 1", n)
	}
	b.click(tid("job-link"), http.StatusOK)
	b.wantIDs("job", "job-detail", "job-id", "job-state", "job-queue", "job-kind", "job-attempt", "job-error",
		"job-args", "job-metadata", "job-tags", "job-history", "attempt-row", "job-lineage", "action-retry", "action-delete")
	b.noIDs("failed job", "action-cancel", "action-run-now")
	if id := b.text("job-id"); id != f.webhook {
		t.Errorf("job page of %s shows %s", f.webhook, id)
	}
	if s := b.text("job-state"); s != "failed" {
		t.Errorf("job state %q", s)
	}
	if n := b.count("attempt-row"); n != 3 {
		t.Errorf("%d attempts in the timeline, want 3", n)
	}
	if s := b.text("job-attempt"); s != "3 of 3" {
		t.Errorf("job attempt %q", s)
	}
	if s := b.text("job-error"); !strings.Contains(s, "502 Bad Gateway (attempt 3)") {
		t.Errorf("job error %q", s)
	}
	if s := b.text("job-args"); !strings.Contains(s, `"order": 4711`) {
		t.Errorf("job arguments not pretty-printed: %q", s)
	}
	b.shotPage("job")

	// A succeeded job with its output.
	b.open("/jobs/"+f.jobs[skiplock.StateSucceeded], http.StatusOK)
	b.wantIDs("succeeded job", "job-output", "job-tags", "action-delete")
	if s := b.text("job-output"); !strings.Contains(s, "m-4711") {
		t.Errorf("job output %q", s)
	}
	b.shot("job-succeeded")

	// A flow's tree on the page of one of its children (docs/flows.md).
	flow, err := f.client.EnqueueFlow(context.Background(), skiplock.Flow{Kind: "build_report", Payload: []byte(`{}`),
		Children: []skiplock.Flow{{Kind: "send_email", Payload: []byte(`{}`)}, {Kind: "send_email", Payload: []byte(`{}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	b.open("/jobs/"+flow.Children[0].ID, http.StatusOK)
	b.wantIDs("flow child", "job-flow", "flow-node")
	if n := b.count("flow-node"); n != 3 {
		t.Errorf("flow tree: %d jobs, want 3", n)
	}
	if s := b.text("job-flow"); !strings.Contains(s, "build_report waiting (2 of 2 children open") || !strings.Contains(s, "◀") {
		t.Errorf("flow tree %q", s)
	}

	// Lineage: from a job of the order's transaction to everything it wrote.
	b.open("/jobs/"+f.orderJob, http.StatusOK)
	b.click(tid("job-lineage"), http.StatusOK)
	b.wantIDs("lineage", "lineage", "lineage-jobs", "lineage-events", "job-row", "event-row")
	if !strings.HasSuffix(b.location(), "/tx/"+strconv.FormatInt(f.lineageTx, 10)+"?job="+f.orderJob) {
		t.Errorf("lineage link went to %s", b.location())
	}
	if j, e := eval[int](b, `document.querySelectorAll('[data-testid="lineage-jobs"] [data-testid="job-row"]').length`),
		eval[int](b, `document.querySelectorAll('[data-testid="lineage-events"] [data-testid="event-row"]').length`); j != 2 || e != 1 {
		t.Errorf("lineage: %d jobs and %d events, want 2 and 1", j, e)
	}
	b.shot("lineage")

	// Queues.
	b.click(tid("nav-queues"), http.StatusOK)
	b.wantIDs("queues", "queues", "queues-table", "queue-row", "queue-state", "queue-pause", "queue-resume")
	if s := eval[string](b, `document.querySelector('[data-queue="paused"] [data-testid="queue-state"]').textContent`); !strings.Contains(s, "paused since") {
		t.Errorf("queue paused shows %q", s)
	}
	b.shot("queues")

	// Schedules.
	b.click(tid("nav-schedules"), http.StatusOK)
	b.wantIDs("schedules", "schedules", "schedules-table", "schedule-row", "schedule-state", "schedule-pause", "schedule-trigger")
	if s := eval[string](b, `document.querySelector('[data-schedule="nightly"] [data-testid="schedule-state"]').textContent.trim()`); s != "enabled" {
		t.Errorf("schedule nightly is %q", s)
	}
	b.shot("schedules")

	// The outbox, tab by tab, and a dead event.
	b.click(tid("nav-outbox"), http.StatusOK)
	b.wantIDs("outbox", "outbox", "outbox-tab-pending", "outbox-tab-dead", "outbox-tab-published", "outbox-lag",
		"outbox-unpublished", "outbox-dead-count", "outbox-table", "event-row")
	if s := b.text("outbox-unpublished"); s != "2" {
		t.Errorf("outbox: %s unpublished, want 2", s)
	}
	b.shot("outbox")
	b.click(tid("outbox-tab-published"), http.StatusOK)
	if b.count("event-row") != 1 || eval[string](b, `document.querySelector('[data-testid="event-row"]').dataset.eventId`) != f.events[outbox.StatePublished] {
		t.Errorf("published tab: want only event %s", f.events[outbox.StatePublished])
	}
	b.click(tid("outbox-tab-dead"), http.StatusOK)
	b.wantIDs("dead events", "event-row", "event-requeue", "outbox-requeue-dead")
	if s := b.text("outbox-dead-count"); s != "1" {
		t.Errorf("outbox: %s dead, want 1", s)
	}
	b.shot("outbox-dead")
	b.click(tid("event-link"), http.StatusOK)
	b.wantIDs("event", "event-detail", "event-id", "event-state", "event-payload", "event-headers", "event-error",
		"event-requeue", "event-lineage")
	if s := b.text("event-error"); !strings.Contains(s, "broker said no") {
		t.Errorf("event error %q", s)
	}
	b.shot("event")

	// The confirmation of a bulk action.
	b.open("/jobs?state=failed", http.StatusOK)
	b.click(tid("bulk-retry"), http.StatusOK)
	b.wantIDs("bulk confirmation", "bulk-confirm", "bulk-count", "bulk-submit", "bulk-back")
	if s := b.text("bulk-count"); s == "" || s == "0" {
		t.Errorf("bulk retry of failed jobs counts %q", s)
	}
	b.shot("bulk-confirm")
	b.click(tid("bulk-back"), http.StatusOK)
	if !strings.Contains(b.location(), "/jobs?state=failed") {
		t.Errorf("back from the confirmation to %s", b.location())
	}

	// Errors are pages too.
	b.open("/jobs/00000000-0000-0000-0000-000000000000", http.StatusNotFound)
	b.wantIDs("missing job", "error")
}

// sendEmail is the fixture's send_email job, for a worker.
type sendEmail struct {
	To string `json:"to"`
}

func (sendEmail) Kind() string { return "send_email" }

// browserRetry: filter the failed jobs, open the one, retry it, and watch a worker
// run it through the live refresh.
func browserRetry(t *testing.T, browserCtx context.Context) {
	f := seed(t)
	workers := skiplock.NewWorkers()
	must(t, skiplock.AddWorker(workers, skiplock.WorkFunc[sendEmail](func(ctx context.Context, job *skiplock.Job, a sendEmail) error {
		return job.SetOutput(map[string]string{"message_id": "m-" + job.ID[:8], "to": a.To})
	}), nil))
	worker := skiplocktest.NewClient(t, skiplock.Config{Schema: f.client.Schema(), Workers: workers,
		Queues: map[string]skiplock.QueueConfig{"mail": {MaxWorkers: 2}}, PollInterval: 200 * time.Millisecond, ReclaimInterval: -1})
	must(t, worker.Start(f.ctx))

	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll, RefreshInterval: time.Second}))
	b := newTab(t, browserCtx, srv.URL)
	b.open("/jobs", http.StatusOK)
	b.run("choose state failed", chromedp.SetValue(tid("filter-state"), "failed"))
	b.click(tid("filter-submit"), http.StatusOK)
	if loc := b.location(); !strings.Contains(loc, "state=failed") {
		t.Errorf("the filter went to %s", loc)
	}
	if n := b.count("job-row"); n != 1 {
		t.Fatalf("failed jobs: %d rows, want 1", n)
	}
	if s := b.text("job-row-state"); s != "failed" {
		t.Errorf("the row's state is %q", s)
	}
	b.shot("jobs-failed")
	// A refresh changes only what differs: the link stays the same element, so a
	// click that lands during a refresh still lands on it.
	b.run("mark the job link", chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="job-link"]').skiplockMark = true`))
	before := b.text("live-status")
	b.waitFor("a live refresh after the mark", fmt.Sprintf(
		`(s => s.startsWith("updated") && s !== %q)(document.querySelector('[data-testid="live-status"]').textContent.trim())`, before), 30*time.Second)
	if !eval[bool](b, `document.querySelector('[data-testid="job-link"]').skiplockMark === true`) {
		t.Error("the live refresh replaced the job link: want it patched in place")
	}
	b.click(tid("job-link"), http.StatusOK)
	failed := f.jobs[skiplock.StateFailed]
	if id := b.text("job-id"); id != failed {
		t.Fatalf("opened job %s, want %s", id, failed)
	}
	if s := b.text("job-error"); !strings.Contains(s, "smtp: mailbox unavailable") {
		t.Errorf("job error %q", s)
	}
	b.shot("job-failed")

	b.click(tid("action-retry"), http.StatusOK)
	if n := b.dialogs.Load(); n != 0 {
		t.Errorf("retry asked %d times; only cancel and delete ask", n)
	}
	if s := b.text("flash"); s != "Job retried." {
		t.Errorf("flash after retry: %q", s)
	}
	// The worker runs it; the page shows it without being reloaded (the marker
	// survives only in this document).
	b.run("mark the document", chromedp.Evaluate[chromedp.Void](`window.skiplockNoReload = true`))
	b.waitFor("the retried job to show succeeded",
		`document.querySelector('[data-testid="job-state"]').textContent.trim() === "succeeded"`, 30*time.Second)
	if !eval[bool](b, `window.skiplockNoReload === true`) {
		t.Error("the page was reloaded: want the live refresh to update it in place")
	}
	// The worker may finish before the page loads, so wait for a refresh rather than
	// expect one to have happened already (refreshes come every second).
	b.waitFor("the live refresh to run",
		`document.querySelector('[data-testid="live-status"]').textContent.trim().startsWith("updated")`, 30*time.Second)
	if n := b.count("attempt-row"); n != 2 {
		t.Errorf("%d attempts after the retry, want 2", n)
	}
	if s := b.text("job-output"); !strings.Contains(s, "bob@example.com") {
		t.Errorf("job output %q", s)
	}
	b.noIDs("succeeded job", "action-retry", "action-cancel")
	b.shot("job-retried")
	j, err := f.client.JobGet(f.ctx, failed)
	must(t, err)
	if j.State != skiplock.StateSucceeded || j.Attempt != 2 {
		t.Errorf("the job is %s after %d attempts, want succeeded after 2", j.State, j.Attempt)
	}
}

// browserCancelConfirm: Cancel asks first; dismissing leaves the job, accepting
// cancels it.
func browserCancelConfirm(t *testing.T, browserCtx context.Context) {
	f := seed(t)
	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll}))
	b := newTab(t, browserCtx, srv.URL)
	pending := f.jobs[skiplock.StatePending]
	b.open("/jobs/"+pending, http.StatusOK)
	b.wantIDs("pending job", "action-cancel", "action-run-now", "action-delete")
	if s := eval[string](b, `document.querySelector('[data-testid="action-cancel"]').form.dataset.confirm`); s != "Cancel this job?" {
		t.Errorf("cancel's question %q", s)
	}

	b.confirm.Store(false)
	// The dialog blocks the click until it is answered; then the page is still this one.
	b.run("click cancel, and dismiss", chromedp.Click(tid("action-cancel"), chromedp.NodeVisible))
	if msg := b.waitDialog(); msg != "Cancel this job?" {
		t.Errorf("the dialog asked %q", msg)
	}
	if loc := b.location(); !strings.HasSuffix(loc, "/jobs/"+pending) {
		t.Errorf("after dismissing, the page is %s", loc)
	}
	if n := b.dialogs.Load(); n != 1 {
		t.Fatalf("%d dialogs, want 1", n)
	}
	j, err := f.client.JobGet(f.ctx, pending)
	must(t, err)
	if j.State != skiplock.StatePending {
		t.Fatalf("dismissed cancel: the job is %s", j.State)
	}

	b.confirm.Store(true)
	b.click(tid("action-cancel"), http.StatusOK)
	if msg := b.waitDialog(); msg != "Cancel this job?" {
		t.Errorf("the dialog asked %q", msg)
	}
	if s := b.text("flash"); s != "Job cancelled." {
		t.Errorf("flash %q", s)
	}
	if s := b.text("job-state"); s != "cancelled" {
		t.Errorf("job state %q after cancel", s)
	}
	b.wantIDs("cancelled job", "action-retry", "action-delete")
	j, err = f.client.JobGet(f.ctx, pending)
	must(t, err)
	if j.State != skiplock.StateCancelled {
		t.Errorf("accepted cancel: the job is %s", j.State)
	}

	// Delete asks too, and goes back to the list.
	b.click(tid("action-delete"), http.StatusOK)
	if msg := b.waitDialog(); msg != "Delete this job for good?" {
		t.Errorf("the dialog asked %q", msg)
	}
	if n := b.dialogs.Load(); n != 3 {
		t.Errorf("%d dialogs, want 3", n)
	}
	if s := b.text("flash"); s != "Job deleted." || !strings.HasSuffix(strings.Split(b.location(), "?")[0], "/jobs") {
		t.Errorf("after delete: flash %q on %s", s, b.location())
	}
	if _, err := f.client.JobGet(f.ctx, pending); !errors.Is(err, skiplock.ErrNotFound) {
		t.Errorf("deleted job: %v", err)
	}
}

// browserBulkCancel: filter a queue in the form, cancel every job it matches through
// the confirmation page.
func browserBulkCancel(t *testing.T, browserCtx context.Context) {
	f := seed(t)
	var ids []string
	for i := range 5 {
		res, err := f.client.EnqueueRaw(f.ctx, "send_email", []byte(`{"to":"reader`+strconv.Itoa(i)+`@example.com"}`),
			&skiplock.EnqueueOpts{Queue: "newsletter", Delay: time.Hour})
		must(t, err)
		ids = append(ids, res.ID)
	}
	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll}))
	b := newTab(t, browserCtx, srv.URL)
	b.open("/jobs", http.StatusOK)
	b.run("type the queue", chromedp.SendKeys(tid("filter-queue"), "newsletter"))
	b.click(tid("filter-submit"), http.StatusOK)
	if n := b.count("job-row"); n != 5 {
		t.Fatalf("queue newsletter: %d rows, want 5", n)
	}
	b.click(tid("bulk-cancel"), http.StatusOK)
	b.wantIDs("confirmation", "bulk-confirm", "bulk-count", "bulk-submit", "bulk-back")
	if s := b.text("bulk-count"); s != "5" {
		t.Errorf("the confirmation counts %q, want 5", s)
	}
	if s := eval[string](b, `document.querySelector('[data-testid="bulk-action"]').value`); s != "cancel" {
		t.Errorf("the confirmation's action %q", s)
	}
	if s := b.text("bulk-submit"); s != "Cancel 5 jobs" {
		t.Errorf("the button says %q", s)
	}
	if n := b.dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs before the confirmation's button", n)
	}
	b.click(tid("bulk-submit"), http.StatusOK)
	if s := b.text("flash"); s != "Cancelled 5 jobs." {
		t.Errorf("flash %q", s)
	}
	if loc := b.location(); !strings.Contains(loc, "queue=newsletter") {
		t.Errorf("after the bulk cancel the page is %s, want the filtered list", loc)
	}
	states := eval[[]string](b, `Array.from(document.querySelectorAll('[data-testid="job-row-state"]')).map(e => e.textContent.trim())`)
	if len(states) != 5 || strings.Join(states, ",") != strings.Repeat("cancelled,", 4)+"cancelled" {
		t.Errorf("rows after the bulk cancel: %v", states)
	}
	b.shot("bulk-cancelled")
	for _, id := range ids {
		j, err := f.client.JobGet(f.ctx, id)
		must(t, err)
		if j.State != skiplock.StateCancelled {
			t.Errorf("job %s is %s", id, j.State)
		}
	}
	// Jobs outside the filter are untouched.
	j, err := f.client.JobGet(f.ctx, f.jobs[skiplock.StatePending])
	must(t, err)
	if j.State != skiplock.StatePending {
		t.Errorf("the pending job of mail is %s", j.State)
	}
}

// queuePaused reports whether queue is paused.
func queuePaused(t *testing.T, f *fixture, queue string) bool {
	t.Helper()
	qs, err := f.client.QueueList(f.ctx)
	must(t, err)
	for _, q := range qs {
		if q.Name == queue {
			return q.Paused
		}
	}
	return false
}

// browserCSRF: a page of another site that posts to the dashboard, in the browser of
// a signed-in operator, is refused; so are forged POSTs without the session's token.
func browserCSRF(t *testing.T, browserCtx context.Context) {
	f := seed(t)
	srv := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll}))
	target := srv.URL + "/queues/pause"
	// Another site (localhost is another site than 127.0.0.1) with a form that
	// pauses queue mail, with and without a made-up token.
	evil := serveBrowser(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>win a prize</title>
<form method="post" action="%s"><input type="hidden" name="queue" value="mail"><button id="plain">Claim your prize</button></form>
<form method="post" action="%s"><input type="hidden" name="queue" value="mail"><input type="hidden" name="csrf" value="%s"><button id="token">Claim it again</button></form>`,
			target, target, strings.Repeat("ab", 32))
	}))
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)

	b := newTab(t, browserCtx, srv.URL)
	b.open("/queues", http.StatusOK) // the operator's session: its cookie is set
	b.wantIDs("queues", "queue-pause")
	for _, button := range []string{"plain", "token"} {
		b.open("", http.StatusOK) // back to the dashboard between attempts
		b.run("visit the other site", chromedp.Navigate(evilURL))
		b.follow("submit the other site's form "+button, http.StatusForbidden, chromedp.Click(chromedp.ID(button), chromedp.NodeVisible))
		if s := b.text("error"); !strings.HasPrefix(s, "Refused") {
			t.Errorf("the other site's form %s: %q", button, s)
		}
		if loc := b.location(); !strings.HasPrefix(loc, target) {
			t.Errorf("the other site's form %s posted to %s", button, loc)
		}
	}
	b.shot("csrf-refused")
	// A form on the dashboard's own origin without the token, or with a wrong one.
	b.open("/queues", http.StatusOK)
	b.follow("post without the token", http.StatusForbidden, postFormJS("/queues/pause", map[string]string{"queue": "mail"}))
	if s := b.text("error"); !strings.Contains(s, "security token") {
		t.Errorf("a post without the token: %q", s)
	}
	b.open("/queues", http.StatusOK)
	b.follow("post with a wrong token", http.StatusForbidden, postFormJS("/queues/pause", map[string]string{"queue": "mail", "csrf": strings.Repeat("0", 64)}))
	// Plain HTTP: no session, another origin.
	for name, hdr := range map[string][]string{
		"no session or token": nil,
		"from another origin": {"Origin", "http://evil.example"},
		"cross-site":          {"Sec-Fetch-Site", "cross-site"},
	} {
		if code := plainPost(t, target, url.Values{"queue": {"mail"}}, hdr...); code != http.StatusForbidden {
			t.Errorf("a forged POST %s: status %d, want 403", name, code)
		}
	}
	if queuePaused(t, f, "mail") {
		t.Fatal("a forged request paused queue mail")
	}
	// The operator's own button works.
	b.open("/queues", http.StatusOK)
	b.click(chromedp.CSS(`[data-queue="mail"] [data-testid="queue-pause"]`), http.StatusOK)
	if s := b.text("flash"); s != "Queue paused." {
		t.Errorf("flash %q", s)
	}
	if !queuePaused(t, f, "mail") {
		t.Error("the operator's pause did not pause queue mail")
	}
}

// browserReadOnly: the same schema through a dashboard that allows no action shows no
// action, and refuses a POST that carries the session's valid token.
func browserReadOnly(t *testing.T, browserCtx context.Context) {
	f := seed(t)
	admin := serveBrowser(t, f.handler(dashboard.Options{Authorize: allowAll}))
	viewer := serveBrowser(t, f.handler(dashboard.Options{})) // Authorize nil: read-only
	failed := f.jobs[skiplock.StateFailed]

	a := newTab(t, browserCtx, admin.URL)
	a.open("/jobs/"+failed, http.StatusOK)
	a.wantIDs("admin's failed job", "action-retry", "action-delete")
	a.noIDs("admin's failed job", "read-only")

	b := newTab(t, browserCtx, viewer.URL)
	actions := []string{"action-retry", "action-cancel", "action-delete", "action-run-now", "bulk-retry", "bulk-cancel",
		"bulk-delete", "bulk-run-now", "queue-pause", "queue-resume", "schedule-pause", "schedule-resume", "schedule-trigger",
		"event-requeue", "outbox-requeue-dead"}
	for _, path := range []string{"/", "/jobs", "/jobs?state=failed", "/jobs/" + failed, "/jobs/" + f.jobs[skiplock.StatePending],
		"/queues", "/schedules", "/outbox?state=dead", "/outbox/" + f.events[outbox.StateDead], "/tx/" + strconv.FormatInt(f.txid, 10)} {
		b.open(path, http.StatusOK)
		b.wantIDs(path, "read-only")
		b.noIDs(path, actions...)
	}
	b.open("/jobs/"+failed, http.StatusOK)
	b.shot("read-only-job")
	// The bulk confirmation is refused too.
	b.open("/jobs/bulk?action=retry&state=failed", http.StatusForbidden)
	// A POST with the session's own, valid token: refused for want of permission.
	b.open("/jobs/"+failed, http.StatusOK)
	token := eval[string](b, `document.querySelector('meta[name="csrf-token"]').content`)
	if len(token) != 64 {
		t.Fatalf("csrf token %q", token)
	}
	b.follow("retry as a viewer", http.StatusForbidden, postFormJS("/jobs/"+failed+"/retry", map[string]string{"csrf": token}))
	if s := b.text("error"); !strings.Contains(s, "not allowed") || !strings.Contains(s, dashboard.ActionJobRetry) {
		t.Errorf("the refusal says %q", s)
	}
	if code := plainPost(t, viewer.URL+"/jobs/"+failed+"/retry", nil); code != http.StatusForbidden {
		t.Errorf("a plain POST to the viewer's dashboard: %d", code)
	}
	j, err := f.client.JobGet(f.ctx, failed)
	must(t, err)
	if j.State != skiplock.StateFailed {
		t.Errorf("the viewer's retry changed the job to %s", j.State)
	}
}
