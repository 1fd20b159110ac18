package dashboard_test

// Helpers of the browser tests (browser_test.go): a headless Chromium driven with
// chromedp, one process per test binary run, one isolated tab (its own cookies)
// per test.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// requireBrowserEnv, set to 1, makes a missing Chromium a failure rather than a
// skip (CI sets it: .ci/run).
const requireBrowserEnv = "SKIPLOCK_REQUIRE_BROWSER"

// chromiumEnv names another Chromium or Chrome binary than /usr/bin/chromium.
const chromiumEnv = "SKIPLOCK_CHROMIUM"

// screenshotDir holds the screenshots the browser tests take (git-ignored test
// artifacts; docs/img has a few of them, copied by hand).
const screenshotDir = "testdata/screenshots"

// actionTimeout bounds one step of a browser test (a navigation, a click, a wait):
// generous, as the race detector and a busy 2-core machine slow everything down.
const actionTimeout = 45 * time.Second

// chromiumPath returns the browser to drive, or skips the test — loudly — when there
// is none (fails it when SKIPLOCK_REQUIRE_BROWSER=1).
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv(chromiumEnv)
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if p, err := exec.LookPath(path); err == nil {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("!!! BROWSER TESTS NOT RUN: no Chromium at %s (nor chromium on $PATH). "+
		"Install it with `make deps` (Debian: apt-get install chromium) or point $%s at a Chrome binary.", path, chromiumEnv)
	if os.Getenv(requireBrowserEnv) == "1" {
		t.Fatal(msg + " " + requireBrowserEnv + "=1, so this is a failure.")
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg + " Set " + requireBrowserEnv + "=1 to fail instead of skipping.")
	return ""
}

// syncBuffer collects the browser's output for a failure message.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 64<<10 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBrowser starts a headless Chromium for t and its subtests, and stops it
// when t ends (after its parallel subtests). Each subtest opens its own tab with
// newTab.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	out := &syncBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
		chromedp.CombinedOutput(out),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser to exit and removes its profile
	})
	// The first Do starts the browser and binds its life to browserCtx (so not a
	// context with a timeout); a watchdog bounds the start instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(browserCtx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v\n%s", exe, err, out.String())
		}
	case <-time.After(2 * time.Minute):
		cancelBrowser()
		t.Fatalf("%s did not start within 2 minutes\n%s", exe, out.String())
	}
	return browserCtx
}

// tab is one browser tab, with its own cookies (a browser context of its own),
// on a dashboard served at base.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string // the server's URL, with the dashboard's path

	// confirm answers window.confirm: true accepts. dialogs counts them, and answered
	// receives the message of each once it is answered.
	confirm  atomic.Bool
	dialogs  atomic.Int32
	answered chan string

	mu       sync.Mutex
	problems []string // exceptions and Content-Security-Policy refusals the pages logged
}

// newTab opens a tab in the browser of browserCtx, for the dashboard at base. Its
// dialogs (window.confirm) are answered by tab.confirm.
func newTab(t *testing.T, browserCtx context.Context, base string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	b := &tab{t: t, ctx: ctx, base: strings.TrimRight(base, "/"), answered: make(chan string, 16)}
	b.confirm.Store(true)
	// The first Do opens the tab and binds its life to its context: ctx itself, not
	// one with a timeout (which would close the tab when it ends); a watchdog bounds it.
	opened := make(chan error, 1)
	go func() { opened <- chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)) }()
	select {
	case err := <-opened:
		must(t, err)
	case <-time.After(actionTimeout):
		t.Fatal("opening a tab timed out")
	}
	// Subscribed before anything can open a dialog. A dialog blocks the page, and so
	// the click that opened it: it is answered from here, not from the clicking step.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return // the tab's context ended
			}
			b.dialogs.Add(1)
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: b.confirm.Load()})
			select {
			case b.answered <- ev.Message:
			default:
			}
		}
	}()
	// Script errors and CSP refusals fail the test: the pages must work under their
	// own strict policy. (Best effort: what arrived by the end of the test.)
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				b.mu.Lock()
				b.problems = append(b.problems, fmt.Sprintf("%s %s:%d: %s", m.Type, m.URL, m.Line+1, m.Text))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Errorf("the browser console: %s", p)
		}
	})
	return b
}

// waitDialog waits until a dialog was answered and returns its message.
func (b *tab) waitDialog() string {
	b.t.Helper()
	select {
	case msg := <-b.answered:
		return msg
	case <-time.After(actionTimeout):
		b.t.Fatal("no dialog was shown")
		return ""
	}
}

// run runs steps with a timeout, failing the test on an error.
func (b *tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
}

// location is the tab's URL, for failure messages.
func (b *tab) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return "?"
	}
	return loc
}

// open navigates to a path below the dashboard and checks the status of the answer.
func (b *tab) open(path string, status int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	res, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+path))
	if err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
	if res == nil || int(res.Status) != status {
		got := -1
		if res != nil {
			got = int(res.Status)
		}
		b.t.Fatalf("open %s: status %d, want %d\n%s", path, got, status, b.bodyText())
	}
}

// follow runs steps that navigate (a click on a link or a submit button), waits for
// the new page and checks its status (after redirects).
func (b *tab) follow(what string, status int, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	res, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.location())
	}
	if res == nil || int(res.Status) != status {
		got := -1
		if res != nil {
			got = int(res.Status)
		}
		b.t.Fatalf("%s: status %d, want %d (page %s)\n%s", what, got, status, b.location(), b.bodyText())
	}
}

// tid is the CSS selector of the elements with data-testid id.
func tid(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

// click clicks the first element matching sel once it is visible, and waits for
// the page it opens (answering its confirm dialog, if any, with b.confirm).
func (b *tab) click(sel chromedp.CSS, status int) {
	b.t.Helper()
	b.follow("click "+string(sel), status, chromedp.Click(sel, chromedp.NodeVisible))
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v (page %s)", expr, err, b.location())
	}
	return v
}

// count returns how many elements of the page have data-testid id.
func (b *tab) count(id string) int {
	b.t.Helper()
	return eval[int](b, `document.querySelectorAll('[data-testid="`+id+`"]').length`)
}

// visible returns how many elements with data-testid id are rendered (have a box).
func (b *tab) visible(id string) int {
	b.t.Helper()
	return eval[int](b, `Array.from(document.querySelectorAll('[data-testid="`+id+`"]')).filter(e => e.getClientRects().length > 0).length`)
}

// text returns the trimmed text of the first element with data-testid id.
func (b *tab) text(id string) string {
	b.t.Helper()
	return eval[string](b, `(document.querySelector('[data-testid="`+id+`"]') || {textContent: "<none>"}).textContent.trim()`)
}

// bodyText is the page's text, for failure messages.
func (b *tab) bodyText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(no text: " + err.Error() + ")"
	}
	return s
}

// wantIDs fails the test unless the page shows at least one element of each testid.
func (b *tab) wantIDs(page string, ids ...string) {
	b.t.Helper()
	for _, id := range ids {
		if b.visible(id) == 0 {
			b.t.Errorf("%s: no visible %s", page, id)
		}
	}
}

// noIDs fails the test if the page has an element of any of the testids.
func (b *tab) noIDs(page string, ids ...string) {
	b.t.Helper()
	for _, id := range ids {
		if n := b.count(id); n != 0 {
			b.t.Errorf("%s: %d of %s, want none", page, n, id)
		}
	}
}

// waitFor waits until the JavaScript expression is true, polling on every DOM
// change (live refresh replaces #live), or fails the test with what.
func (b *tab) waitFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		b.t.Fatalf("waiting for %s: %v (page %s)\n%s", what, err, b.location(), b.bodyText())
	}
}

// shot saves a screenshot of the viewport as testdata/screenshots/name.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	b.screenshot(name, chromedp.CaptureScreenshot())
}

// shotPage saves a screenshot of the whole page, beyond the viewport.
func (b *tab) shotPage(name string) {
	b.t.Helper()
	b.screenshot(name, chromedp.FullScreenshot(100)) // 100: PNG
}

func (b *tab) screenshot(name string, capture chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, capture)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(screenshotDir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s (%d KB)", path, len(png)>>10)
}

// postForm has the browser submit a form it builds itself (as a forged page
// would), with the given fields, to a path of the dashboard; follow catches the answer.
func postFormJS(path string, fields map[string]string) chromedp.Action[chromedp.Void] {
	var js strings.Builder
	js.WriteString(`(() => { const f = document.createElement("form"); f.method = "post"; f.action = ` + strconv.Quote(path) + `;`)
	for k, v := range fields {
		js.WriteString(` { const i = document.createElement("input"); i.type = "hidden"; i.name = ` + strconv.Quote(k) + `; i.value = ` + strconv.Quote(v) + `; f.appendChild(i); }`)
	}
	js.WriteString(` document.body.appendChild(f); f.submit(); })()`)
	return chromedp.Evaluate[chromedp.Void](js.String())
}

// plainPost posts a form with net/http, without the browser's cookies: what a
// forged request from a script or another site's server looks like.
func plainPost(t *testing.T, target string, form url.Values, hdr ...string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	must(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	res.Body.Close()
	return res.StatusCode
}
