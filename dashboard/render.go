package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
)

// pageNames are the templates in templates/, each executed through layout.html.
var pageNames = []string{"overview", "jobs", "job", "confirm", "queues", "schedules", "outbox", "event", "lineage", "login", "error",
	"batches", "flows", "limits", "fair"}

var funcs = template.FuncMap{
	"ts": formatTime,
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"dur":  formatDuration,
	"age":  ageOf,
	"line": oneLine,
	"num":  thousands,
	"jobsurl": func(prefix, queue, state string) string {
		v := url.Values{}
		if queue != "" {
			v.Set("queue", queue)
		}
		if state != "" {
			v.Set("state", state)
		}
		if len(v) == 0 {
			return prefix + "/jobs"
		}
		return prefix + "/jobs?" + v.Encode()
	},
}

func parseTemplates() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parsing the %s template: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what layout.html renders around a page's content.
type page struct {
	AppTitle string
	Title    string
	Nav      string // the active navigation entry
	Prefix   string
	CSRF     string
	Asset    string // the assets' version
	Refresh  int    // seconds between live refreshes; 0: none
	Outbox   bool   // the outbox pages exist
	Logout   bool   // a token login can be ended
	ReadOnly bool   // no action is allowed to anyone
	Flash    string
	Data     any

	h *handler
	r *http.Request
}

// Can reports whether the viewer may perform action (for the templates).
func (p *page) Can(action string) bool { return p.h.can(p.r, action) }

// eventTable is what the "eventtable" template needs besides the rows.
type eventTable struct {
	Rows    []eventRow
	Prefix  string
	CSRF    string
	Requeue bool
}

// EventTable prepares rows for the "eventtable" template.
func (p *page) EventTable(rows []eventRow) eventTable {
	return eventTable{Rows: rows, Prefix: p.Prefix, CSRF: p.CSRF, Requeue: p.Can(ActionOutboxRequeue)}
}

// render executes a page's template and writes it with status.
func (h *handler) render(q *request, status int, name, title, nav string, data any) {
	p := &page{AppTitle: h.opts.Title, Title: title, Nav: nav, Prefix: q.prefix, CSRF: q.csrf, Asset: h.assetVersion,
		Outbox: h.ob != nil, Logout: q.authed && h.opts.Token != "", ReadOnly: h.opts.Authorize == nil,
		Data: data, h: h, r: q.r}
	if h.opts.RefreshInterval > 0 && status == http.StatusOK && nav != "" {
		p.Refresh = max(1, int(h.opts.RefreshInterval.Round(time.Second)/time.Second))
	}
	p.Flash = flashText(q.r.URL.Query())
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.opts.Logger.Error("dashboard: rendering a page", "page", name, "err", err)
		http.Error(q.w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	q.w.Header().Set("Content-Type", "text/html; charset=utf-8")
	q.w.WriteHeader(status)
	if q.r.Method != http.MethodHead {
		q.w.Write(buf.Bytes())
	}
}

type errorData struct {
	Status  int
	Message string
}

// fail renders the error page.
func (h *handler) fail(q *request, status int, msg string) {
	h.render(q, status, "error", http.StatusText(status), "", errorData{Status: status, Message: msg})
}

// failErr renders err with the status its kind calls for: 400 for bad input, 404 for
// what does not exist, 409 for a job in the wrong state, 403 for what the database
// role may not do, 500 (logged) for anything else.
func (h *handler) failErr(q *request, err error) {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, skiplock.ErrInvalid):
		h.fail(q, http.StatusBadRequest, err.Error())
	case errors.Is(err, skiplock.ErrNotFound), errors.Is(err, outbox.ErrNotFound):
		h.fail(q, http.StatusNotFound, err.Error())
	case errors.Is(err, skiplock.ErrJobState):
		h.fail(q, http.StatusConflict, err.Error())
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		h.fail(q, http.StatusForbidden, "The dashboard's database role may not do this ("+pgErr.Message+"): actions need the worker role's grants, outbox requeues the relay role's (docs/roles.md).")
	default:
		h.opts.Logger.Error("dashboard: request failed", "path", q.path, "err", err)
		h.fail(q, http.StatusInternalServerError, err.Error())
	}
}

// Flash messages come from the redirect after an action, as fixed words and numbers
// (never free text, so a link cannot make the dashboard say something it did not).
var (
	flashVerbs = map[string]string{"retry": "retried", "cancel": "cancelled", "delete": "deleted", "run_now": "made due now",
		"pause": "paused", "resume": "resumed", "set": "set", "trigger": "triggered", "requeue": "requeued", "login": "signed in"}
	flashWhat = map[string][2]string{"job": {"Job", "jobs"}, "queue": {"Queue", "queues"}, "schedule": {"Schedule", "schedules"},
		"event": {"Event", "events"}, "limit": {"Limit", "limits"}}
)

func flashText(v url.Values) string {
	verb, ok := flashVerbs[v.Get("done")]
	if !ok {
		return ""
	}
	what, ok := flashWhat[v.Get("what")]
	if !ok {
		what = flashWhat["job"]
	}
	n, err := strconv.Atoi(v.Get("n"))
	if err != nil || n < 0 {
		return what[0] + " " + verb + "."
	}
	s := fmt.Sprintf("%s %d %s.", strings.ToUpper(verb[:1])+verb[1:], n, what[1])
	if n == 1 {
		s = fmt.Sprintf("%s 1 %s.", strings.ToUpper(verb[:1])+verb[1:], strings.ToLower(what[0]))
	}
	if sk, err := strconv.Atoi(v.Get("skipped")); err == nil && sk > 0 {
		s += fmt.Sprintf(" %d skipped: in another state by then, or gone.", sk)
	}
	return s
}

// formatTime shows a time in UTC to the second ("" for the zero time).
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// formatDuration shows a duration to two units ("3m 20s", "2h 5m", "450ms").
func formatDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if neg {
		return "in " + s
	}
	return s
}

// oneLine returns the first line of s, cut to n runes.
func oneLine(n int, s string) string {
	s, _, cut := strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	if cut {
		return s + " …"
	}
	return s
}

// pretty indents JSON for display; text that is not JSON is returned as it is.
func pretty(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// relative shows t relative to now, to two units: "3m 20s ago", "in 5s", "now"
// ("" for the zero time). Pages show the UTC time (formatTime) on hover.
func relative(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t).Truncate(time.Second)
	switch {
	case d == 0:
		return "now"
	case d < 0:
		return formatDuration(d) // "in …"
	}
	return formatDuration(d) + " ago"
}

// thousands writes n with thousands separators: 1,000,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}
