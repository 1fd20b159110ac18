package dashboard

// Sessions, CSRF tokens and authentication: the session cookie, the HMAC token every
// POST carries, token and basic-auth login, and redirects.
import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

const (
	sessionCookie = "skiplock_session"
	loginCookie   = "skiplock_login"
)

func mac(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func (q *request) cookiePath() string { return q.prefix + "/" }

// session finds the browser's session cookie, or sets a new one, and derives the
// CSRF token of its forms.
func (h *handler) session(q *request) {
	id := ""
	if c, err := q.r.Cookie(sessionCookie); err == nil && len(c.Value) == 64 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			id = c.Value
		}
	}
	if id == "" {
		if q.r.Method == http.MethodPost {
			return // no session, so no valid token: checkCSRF refuses
		}
		b := make([]byte, 32)
		rand.Read(b)
		id = hex.EncodeToString(b)
		http.SetCookie(q.w, &http.Cookie{Name: sessionCookie, Value: id, Path: q.cookiePath(), HttpOnly: true,
			Secure: q.r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	q.csrf = hex.EncodeToString(mac(h.key, "csrf "+id))
}

func (h *handler) checkCSRF(q *request) bool {
	if q.csrf == "" {
		return false
	}
	got := q.r.PostFormValue("csrf")
	return subtle.ConstantTimeCompare([]byte(got), []byte(q.csrf)) == 1
}

// authenticate checks Options.Token and Options.BasicUser; when neither is set,
// every request passes (the application authenticates).
func (h *handler) authenticate(q *request) bool {
	if h.opts.Token == "" && h.opts.BasicUser == "" {
		return true
	}
	if h.opts.Token != "" {
		if bearer, ok := strings.CutPrefix(q.r.Header.Get("Authorization"), "Bearer "); ok && equalSecret(bearer, h.opts.Token) {
			q.authed = true
			return true
		}
		if c, err := q.r.Cookie(loginCookie); err == nil && equalSecret(c.Value, hex.EncodeToString(h.loginKey)) {
			q.authed = true
			return true
		}
	}
	if h.opts.BasicUser != "" {
		if u, p, ok := q.r.BasicAuth(); ok && equalSecret(u, h.opts.BasicUser) && equalSecret(p, h.opts.BasicPassword) {
			return true // the browser keeps sending it: no logout
		}
		q.w.Header().Set("WWW-Authenticate", `Basic realm="skiplock dashboard", charset="UTF-8"`)
	}
	if h.opts.Token == "" {
		http.Error(q.w, "authentication required", http.StatusUnauthorized)
		return false
	}
	// The login form, with the page asked for to return to.
	h.session(q)
	next := q.prefix + q.path
	if q.r.URL.RawQuery != "" {
		next += "?" + q.r.URL.RawQuery
	}
	h.render(q, http.StatusUnauthorized, "login", "Sign in", "", loginData{Next: next})
	return false
}

// equalSecret compares in constant time (hashes first, so lengths leak nothing).
func equalSecret(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

type loginData struct {
	Next  string
	Error string
}

// login serves the token login form (GET) and checks it (POST).
func (h *handler) login(q *request) {
	if h.opts.Token == "" {
		h.fail(q, http.StatusNotFound, "This dashboard has no login form.")
		return
	}
	h.session(q)
	next := q.r.FormValue("next")
	if q.r.Method != http.MethodPost {
		h.render(q, http.StatusOK, "login", "Sign in", "", loginData{Next: next})
		return
	}
	if err := h.cop.Check(q.r); err != nil || !h.checkCSRF(q) {
		h.fail(q, http.StatusForbidden, "Refused: the form's security token is missing or wrong. Reload the page and try again.")
		return
	}
	if !equalSecret(q.r.PostFormValue("token"), h.opts.Token) {
		h.render(q, http.StatusUnauthorized, "login", "Sign in", "", loginData{Next: next, Error: "That token is not right."})
		return
	}
	http.SetCookie(q.w, &http.Cookie{Name: loginCookie, Value: hex.EncodeToString(h.loginKey), Path: q.cookiePath(),
		HttpOnly: true, Secure: q.r.TLS != nil, SameSite: http.SameSiteStrictMode})
	h.redirect(q, h.safeNext(q, next))
}

// safeNext returns next when it is a path of this dashboard (not another site's), else
// the overview.
func (h *handler) safeNext(q *request, next string) string {
	// Only paths relative to this dashboard's prefix are followed: "//evil" and
	// "/\evil" would leave the site.
	if strings.HasPrefix(next, q.prefix+"/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		if u, err := url.Parse(next); err == nil && u.Scheme == "" && u.Host == "" {
			return next
		}
	}
	return q.prefix + "/"
}

func (h *handler) logout(q *request) {
	http.SetCookie(q.w, &http.Cookie{Name: loginCookie, Value: "", Path: q.cookiePath(), MaxAge: -1,
		HttpOnly: true, Secure: q.r.TLS != nil, SameSite: http.SameSiteStrictMode})
	h.redirect(q, q.prefix+"/login")
}

// redirect answers a POST with 303 See Other to a page of the dashboard.
func (h *handler) redirect(q *request, to string) {
	http.Redirect(q.w, q.r, to, http.StatusSeeOther)
}
