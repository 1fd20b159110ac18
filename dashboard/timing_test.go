package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/skiplocktest"
)

// pageBudget is the 95th percentile a page must stay under on 1,000,000 jobs.
const pageBudget = 200 * time.Millisecond

// TestPageTimingsOnMillionJobs builds 1,000,000 jobs with one INSERT … SELECT (a week
// of a busy schema: mostly finished, a few thousand live, some tagged) and times the
// pages through the handler: 50 requests each of the overview, a filtered job list
// and a job, whose 95th percentile must stay under 200 ms; a few other pages are
// timed for information. Run with SKIPLOCK_MEASURE=1 (and without -race for
// numbers that mean something):
//
//	SKIPLOCK_MEASURE=1 go test -run TestPageTimingsOnMillionJobs -v ./dashboard/
func TestPageTimingsOnMillionJobs(t *testing.T) {
	if os.Getenv("SKIPLOCK_MEASURE") != "1" {
		t.Skip("SKIPLOCK_MEASURE=1 builds 1,000,000 jobs and times the dashboard's pages")
	}
	c, ob := seedMillion(t)
	ctx, pool := t.Context(), c.Pool()
	jobs := pgx.Identifier{c.Schema(), "jobs"}.Sanitize()
	const n = million
	var failedID, midID string
	must(t, pool.QueryRow(ctx, `SELECT id FROM `+jobs+` WHERE status = 'failed' AND queue = 'mail' ORDER BY id OFFSET 30000 LIMIT 1`).Scan(&failedID))
	must(t, pool.QueryRow(ctx, `SELECT id FROM `+jobs+` ORDER BY id OFFSET 500000 LIMIT 1`).Scan(&midID))

	h, err := dashboard.New(c, ob, dashboard.Options{Authorize: allowAll})
	must(t, err)
	get := func(path string) (time.Duration, int) {
		req := httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		return time.Since(start), rec.Code
	}
	type row struct {
		page, path    string
		n             int
		gated         bool
		p50, p95, max time.Duration
	}
	measure := func(page, path string, n int, gated bool) row {
		t.Helper()
		for range 3 { // warm: prepared statements, caches
			if _, code := get(path); code != http.StatusOK {
				t.Fatalf("%s: status %d", path, code)
			}
		}
		ds := make([]time.Duration, n)
		for i := range ds {
			d, code := get(path)
			if code != http.StatusOK {
				t.Fatalf("%s: status %d", path, code)
			}
			ds[i] = d
		}
		slices.Sort(ds)
		return row{page: page, path: path, n: n, gated: gated,
			p50: ds[(n-1)/2], p95: ds[(95*n+99)/100-1], max: ds[n-1]}
	}
	rows := []row{
		measure("overview", "/", 50, true),
		measure("jobs, filtered", "/jobs?state=failed&queue=mail", 50, true),
		measure("job", "/jobs/"+failedID, 50, true),
		// For information: other pages and filters.
		measure("jobs, all", "/jobs", 10, false),
		measure("jobs, filtered, deep page", "/jobs?state=failed&queue=mail&after="+midID, 10, false),
		measure("jobs, tag (10%)", "/jobs?tag=vip", 10, false),
		measure("jobs, tag (1%, from the 300,000th job on)", "/jobs?tag=batch-3", 10, false),
		measure("jobs, running (0.1%)", "/jobs?state=running", 10, false),
		measure("jobs, a filter nothing matches", "/jobs?queue=mail&kind=export_csv", 3, false),
		measure("jobs, text search", "/jobs?q=order&state=running", 3, false),
		measure("queues", "/queues", 10, false),
		measure("outbox", "/outbox", 10, false),
		measure("bulk confirmation (counts up to 100,000)", "/jobs/bulk?action=retry&state=failed&queue=mail", 3, false),
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "pages on %d jobs (%d requests each; * = budget p95 < %s):\n", n, 50, pageBudget)
	fmt.Fprintf(&sb, "  %-42s %4s %9s %9s %9s\n", "page", "n", "p50", "p95", "max")
	for _, r := range rows {
		mark := " "
		if r.gated {
			mark = "*"
		}
		fmt.Fprintf(&sb, "%s %-42s %4d %9s %9s %9s   %s\n", mark, r.page, r.n, r.p50.Round(100*time.Microsecond),
			r.p95.Round(100*time.Microsecond), r.max.Round(100*time.Microsecond), r.path)
	}
	t.Log(sb.String())
	for _, r := range rows {
		if r.gated && r.p95 > pageBudget {
			t.Errorf("%s (%s): p95 %s over the %s budget", r.page, r.path, r.p95, pageBudget)
		}
	}
}

const million = 1_000_000

// seedMillion builds a schema of 1,000,000 jobs with one INSERT … SELECT.
func seedMillion(t *testing.T) (*skiplock.Client, *outbox.Outbox) {
	t.Helper()
	c := skiplocktest.NewClient(t, skiplock.Config{})
	ob, err := outbox.New(c, outbox.Config{})
	must(t, err)
	ctx, pool := t.Context(), c.Pool()
	jobs := pgx.Identifier{c.Schema(), "jobs"}.Sanitize()
	const n = million
	// 990,000 finished jobs (80% succeeded, 10% failed, 10% cancelled) over a week, one
	// every 600 ms, so ~6,000 finished in the last hour; 9,000 pending (half due) and
	// 1,000 running. Three queues with two kinds each; one job in ten tagged.
	start := time.Now()
	_, err = pool.Exec(ctx, `INSERT INTO `+jobs+` (queue, kind, payload, status, run_at, attempts, last_error, tags,
  lease_until, lease_token, worker_id, attempted_at, created_at, updated_at)
SELECT q, (ARRAY['send_email', 'send_sms', 'build_report', 'export_csv', 'deliver_webhook', 'sync_crm'])[1 + (g % 3) * 2 + (g / 3) % 2],
       jsonb_build_object('order', g, 'note', 'some payload'), s::`+pgx.Identifier{c.Schema(), "job_status"}.Sanitize()+`,
       CASE WHEN s = 'pending' AND g % 2 = 0 THEN now() + interval '1 hour' ELSE at END,
       CASE WHEN s = 'pending' THEN 0 ELSE 1 + g % 3 END,
       CASE s WHEN 'failed' THEN 'upstream: 503 service unavailable' WHEN 'cancelled' THEN 'cancelled by an operator' END,
       CASE WHEN g % 10 = 3 THEN ARRAY['vip'] WHEN g % 10 = 7 THEN ARRAY['eu', 'batch-' || (g / 100000)] END,
       CASE WHEN s = 'running' THEN now() + interval '1 minute' END,
       CASE WHEN s = 'running' THEN gen_random_uuid() END,
       CASE WHEN s = 'running' THEN 'worker-1' END,
       CASE WHEN s <> 'pending' THEN at END, at, CASE WHEN s IN ('pending', 'running') THEN at ELSE at + interval '2 seconds' END
FROM (SELECT g, (ARRAY['mail', 'reports', 'webhooks'])[1 + g % 3] AS q,
             now() - ($1::int - g) * interval '600 milliseconds' AS at,
             CASE WHEN g % 1000 < 9 THEN 'pending' WHEN g % 1000 = 9 THEN 'running'
                  WHEN g % 10 < 8 THEN 'succeeded' WHEN g % 10 = 8 THEN 'failed' ELSE 'cancelled' END AS s
      FROM generate_series(1, $1::int) g) AS x`, n)
	must(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE "+jobs)
	must(t, err)
	t.Logf("built %d jobs in %s", n, time.Since(start).Round(time.Millisecond))

	return c, ob
}
