package webhookpub

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/outbox"
	"github.com/skiplock/skiplock/outbox/outboxtest"
)

const (
	testSecret    = "whsec_dGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ==" // base64 of "test-secret-0123456789"
	testSecretRaw = "test-secret-0123456789"
)

// receiver is an httptest server that verifies each request with Verify and records
// the ones that pass, by path.
type receiver struct {
	srv     *httptest.Server
	secrets []string

	mu   sync.Mutex
	got  map[string][]outboxtest.Received // by path without the leading slash
	bad  atomic.Int64                     // requests that failed verification
	hits atomic.Int64
}

func newReceiver(t *testing.T, secrets ...string) *receiver {
	t.Helper()
	r := &receiver{secrets: secrets, got: map[string][]outboxtest.Received{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.hits.Add(1)
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Method != http.MethodPost || req.Header.Get("content-type") != "application/json" {
		r.bad.Add(1)
		http.Error(w, "want a JSON POST", http.StatusBadRequest)
		return
	}
	if err := Verify(r.secrets, req.Header, body, time.Minute); err != nil {
		r.bad.Add(1)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	headers := make(map[string]string, len(req.Header))
	for k := range req.Header {
		headers[strings.ToLower(k)] = req.Header.Get(k)
	}
	dest := strings.TrimPrefix(req.URL.Path, "/")
	r.mu.Lock()
	r.got[dest] = append(r.got[dest], outboxtest.Received{
		ID: req.Header.Get(HeaderID), Destination: dest, Payload: body, Headers: headers,
	})
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) snapshot(dest string) []outboxtest.Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outboxtest.Received(nil), r.got[dest]...)
}

func (r *receiver) url(path string) string { return r.srv.URL + "/" + path }

func TestConformance(t *testing.T) {
	rcv := newReceiver(t, testSecret)
	// Endpoints are fixed at New, so the harness hands out names from a pool that
	// every publisher knows.
	const pool = 32
	endpoints := make(map[string]string, pool)
	for i := range pool {
		name := fmt.Sprintf("ep%d", i)
		endpoints[name] = rcv.url(name)
	}
	var next atomic.Int64
	outboxtest.RunConformance(t, outboxtest.Harness{
		NewPublisher: func(t *testing.T) outbox.Publisher {
			p, err := New(Config{Endpoints: endpoints, Secrets: []string{testSecret}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewDestination: func(t *testing.T) string {
			n := next.Add(1) - 1
			if n >= pool {
				t.Fatal("endpoint pool exhausted; raise pool")
			}
			return fmt.Sprintf("ep%d", n)
		},
		Receive: func(t *testing.T, dest string, deadline time.Time, done func([]outboxtest.Received) bool) []outboxtest.Received {
			var got []outboxtest.Received
			outboxtest.WaitFor(time.Until(deadline), func() bool {
				got = rcv.snapshot(dest)
				return done(got)
			})
			return got
		},
	})
	if n := rcv.bad.Load(); n != 0 {
		t.Errorf("%d requests failed verification", n)
	}
}

func newPub(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	if cfg.Secrets == nil {
		cfg.Secrets = []string{testSecret}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStatusCodes(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if code >= 300 && code < 400 {
			w.Header().Set("location", "/200")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "reason")
	}))
	t.Cleanup(srv.Close)
	cases := []struct {
		code      int
		ok        bool
		permanent bool
	}{
		{200, true, false}, {201, true, false}, {204, true, false},
		{301, false, true}, {302, false, true}, {307, false, true}, {308, false, true},
		{400, false, true}, {401, false, true}, {404, false, true}, {410, false, true}, {422, false, true},
		{408, false, false}, {429, false, false},
		{500, false, false}, {502, false, false}, {503, false, false},
	}
	endpoints := map[string]string{}
	var msgs []outbox.Message
	for _, c := range cases {
		name := strconv.Itoa(c.code)
		endpoints[name] = srv.URL + "/" + name
		msgs = append(msgs, outboxtest.NewMessage(name, c.code))
	}
	p := newPub(t, Config{Endpoints: endpoints})
	errs := p.Publish(ctxFor(t), msgs)
	for i, c := range cases {
		err := errs[i]
		if c.ok != (err == nil) {
			t.Errorf("%d: got error %v, want ok=%v", c.code, err, c.ok)
			continue
		}
		if err == nil {
			continue
		}
		if errors.As(err, new(*skiplock.PermanentError)) != c.permanent {
			t.Errorf("%d: permanent=%v, want %v (%v)", c.code, errors.As(err, new(*skiplock.PermanentError)), c.permanent, err)
		}
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode != c.code || se.Body != "reason" {
			t.Errorf("%d: error %v does not carry the status and body", c.code, err)
		}
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var followed atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/target", func(w http.ResponseWriter, r *http.Request) {
		followed.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/target", http.StatusTemporaryRedirect)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p := newPub(t, Config{DefaultURL: srv.URL + "/hook"})
	errs := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 1)})
	if errs[0] == nil || !errors.As(errs[0], new(*skiplock.PermanentError)) {
		t.Fatalf("got %v, want a permanent error", errs[0])
	}
	if n := followed.Load(); n != 0 {
		t.Fatalf("redirect target was requested %d times", n)
	}
}

func TestRoutingByDestination(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, testSecret)
	p := newPub(t, Config{
		Endpoints:  map[string]string{"billing": rcv.url("billing"), "crm": rcv.url("crm")},
		DefaultURL: rcv.url("default"),
	})
	msgs := []outbox.Message{
		outboxtest.NewMessage("billing", 1),
		outboxtest.NewMessage("crm", 2),
		outboxtest.NewMessage("", 3),
		outboxtest.NewMessage("nowhere", 4),
	}
	errs := p.Publish(ctxFor(t), msgs)
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("message %d: %v", i, errs[i])
		}
	}
	if errs[3] == nil || !errors.As(errs[3], new(*skiplock.PermanentError)) || !strings.Contains(errs[3].Error(), "Config.Endpoints") {
		t.Fatalf("unknown destination: got %v, want a permanent error naming Config.Endpoints", errs[3])
	}
	for path, m := range map[string]outbox.Message{"billing": msgs[0], "crm": msgs[1], "default": msgs[2]} {
		got := rcv.snapshot(path)
		if len(got) != 1 || got[0].ID != m.ID {
			t.Errorf("%s: got %+v, want only %s", path, got, m.ID)
		}
	}
	if n := rcv.hits.Load(); n != 3 {
		t.Errorf("server saw %d requests, want 3", n)
	}
}

func TestReservedHeadersWin(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, testSecret)
	p := newPub(t, Config{DefaultURL: rcv.url("h")})
	m := outboxtest.NewMessage("", 1)
	m.Headers = map[string]string{"webhook-id": "forged", "Content-Type": "text/plain", "x-custom": "yes"}
	if err := p.Publish(ctxFor(t), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	got := rcv.snapshot("h")
	if len(got) != 1 {
		t.Fatalf("got %d requests", len(got))
	}
	h := got[0].Headers
	if h["webhook-id"] != m.ID || h["content-type"] != "application/json" || h["x-custom"] != "yes" {
		t.Fatalf("headers: %v", h)
	}
	if h["user-agent"] != "skiplock-webhook" {
		t.Errorf("user-agent: %q", h["user-agent"])
	}
}

func TestSecretRotation(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "old-secret-aaaaaaaaaaaaaaaa", "whsec_bmV3LXNlY3JldC1iYmJiYmJiYmJiYmJiYmJi"
	var captured struct {
		sync.Mutex
		h    http.Header
		body []byte
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		captured.Lock()
		captured.h, captured.body = r.Header.Clone(), b
		captured.Unlock()
	}))
	t.Cleanup(srv.Close)
	p := newPub(t, Config{DefaultURL: srv.URL, Secrets: []string{oldSecret, newSecret}})
	if err := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 1)})[0]; err != nil {
		t.Fatal(err)
	}
	captured.Lock()
	h, body := captured.h, captured.body
	captured.Unlock()
	if sigs := strings.Fields(h.Get(HeaderSignature)); len(sigs) != 2 {
		t.Fatalf("want 2 signatures, got %q", h.Get(HeaderSignature))
	}
	for _, s := range []string{oldSecret, newSecret} {
		if err := Verify([]string{s}, h, body, 0); err != nil {
			t.Errorf("receiver with %q: %v", s, err)
		}
	}
	if err := Verify([]string{"some-other-secret"}, h, body, 0); !errors.Is(err, ErrNoMatchSignature) {
		t.Errorf("receiver with another secret: got %v, want ErrNoMatchSignature", err)
	}
}

func TestSignKnownVector(t *testing.T) {
	t.Parallel()
	// Computed independently: printf 'msg_1.1700000000.{"a":1}' |
	//   openssl dgst -sha256 -hmac 'test-secret-0123456789' -binary | base64
	const want = "v1,ejoQzE/TImEcA/FC5ytYqR3cdqCks6mARgAZD391JFI="
	for _, s := range []string{testSecret, testSecretRaw} {
		keys, err := ParseSecrets([]string{s})
		if err != nil {
			t.Fatal(err)
		}
		if got := Sign(keys, "msg_1", 1700000000, []byte(`{"a":1}`)); got != want {
			t.Errorf("secret %q: got %q, want %q", s, got, want)
		}
	}
}

// The Standard Webhooks project's published test vectors. Source: the reference
// libraries' tests in github.com/standard-webhooks/standard-webhooks
// (libraries/go/webhook_test.go, TestWebhookSign and TestWebhook; the same vector
// is used by the other languages' tests), for the scheme in
// spec/standard-webhooks.md ("Signature scheme": HMAC-SHA256 over
// "{msg_id}.{timestamp}.{payload}", base64, "v1," prefix, space-separated list).
const (
	swSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTimestamp = 1614265330
	swPayload   = `{"test": 2432232314}`
	swSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	swWrongSig  = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

func TestStandardWebhooksVectors(t *testing.T) {
	t.Parallel()
	keys, err := ParseSecrets([]string{swSecret})
	if err != nil {
		t.Fatal(err)
	}
	if got := Sign(keys, swMsgID, swTimestamp, []byte(swPayload)); got != swSignature {
		t.Fatalf("Sign: got %q, want the published %q", got, swSignature)
	}

	at := time.Unix(swTimestamp, 0)
	header := func(sig string, ts int64) http.Header {
		h := http.Header{}
		h.Set(HeaderID, swMsgID)
		h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSignature, sig)
		return h
	}
	cases := []struct {
		name string
		h    http.Header
		now  time.Time
		want error
	}{
		{"published signature", header(swSignature, swTimestamp), at, nil},
		{"published wrong signature", header(swWrongSig, swTimestamp), at, ErrNoMatchSignature},
		{"valid among wrong and other versions", header(strings.Join([]string{swWrongSig, "v2," + swSignature[3:], swSignature, swWrongSig}, " "), swTimestamp), at, nil},
		{"other version only", header("v2,"+swSignature[3:], swTimestamp), at, ErrNoMatchSignature},
		{"timestamp a tolerance old", header(swSignature, swTimestamp), at.Add(DefaultTolerance + time.Second), ErrTimestampSkew},
		{"timestamp a tolerance ahead", header(swSignature, swTimestamp), at.Add(-DefaultTolerance - time.Second), ErrTimestampSkew},
		{"missing id", func() http.Header { h := header(swSignature, swTimestamp); h.Del(HeaderID); return h }(), at, ErrMissingHeaders},
		{"missing timestamp", func() http.Header { h := header(swSignature, swTimestamp); h.Del(HeaderTimestamp); return h }(), at, ErrMissingHeaders},
		{"missing signature", func() http.Header { h := header(swSignature, swTimestamp); h.Del(HeaderSignature); return h }(), at, ErrMissingHeaders},
	}
	for _, c := range cases {
		err := verifyAt([]string{swSecret}, c.h, []byte(swPayload), 0, c.now)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// A tampered body fails with the published signature.
	if err := verifyAt([]string{swSecret}, header(swSignature, swTimestamp), []byte(`{"test": 2432232315}`), 0, at); !errors.Is(err, ErrNoMatchSignature) {
		t.Errorf("tampered body: %v", err)
	}

	// What the Publisher sends verifies against the same rule: sign a request with
	// the vector's secret and check it with an independent HMAC computation.
	type request struct {
		h    http.Header
		body []byte
	}
	received := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received <- request{r.Header.Clone(), mustRead(r)}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	p := newPub(t, Config{Secrets: []string{swSecret}, DefaultURL: srv.URL})
	if errs := p.Publish(ctxFor(t), []outbox.Message{{ID: swMsgID, Payload: []byte(swPayload)}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	req := <-received
	got, body := req.h, req.body
	mac := hmac.New(sha256.New, mustB64(t, strings.TrimPrefix(swSecret, SecretPrefix)))
	mac.Write([]byte(got.Get(HeaderID) + "." + got.Get(HeaderTimestamp) + "." + string(body)))
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); got.Get(HeaderSignature) != want {
		t.Fatalf("sent signature %q, independent computation %q", got.Get(HeaderSignature), want)
	}
	if err := Verify([]string{swSecret}, got, body, 0); err != nil {
		t.Fatalf("Verify of a sent request: %v", err)
	}
}

func mustRead(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerify(t *testing.T) {
	t.Parallel()
	keys, _ := ParseSecrets([]string{testSecret})
	now := time.Unix(1700000000, 0)
	body := []byte(`{"a":1}`)
	header := func(id string, ts int64, sig string) http.Header {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(HeaderSignature, sig)
		return h
	}
	good := Sign(keys, "msg_1", now.Unix(), body)
	cases := []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"valid", header("msg_1", now.Unix(), good), body, nil},
		{"valid among others", header("msg_1", now.Unix(), "v2,abc v1,Zm9v "+good), body, nil},
		{"tampered body", header("msg_1", now.Unix(), good), []byte(`{"a":2}`), ErrNoMatchSignature},
		{"other id", header("msg_2", now.Unix(), good), body, ErrNoMatchSignature},
		{"stale", header("msg_1", now.Unix()-400, Sign(keys, "msg_1", now.Unix()-400, body)), body, ErrTimestampSkew},
		{"future", header("msg_1", now.Unix()+400, Sign(keys, "msg_1", now.Unix()+400, body)), body, ErrTimestampSkew},
		{"within tolerance", header("msg_1", now.Unix()-200, Sign(keys, "msg_1", now.Unix()-200, body)), body, nil},
		{"bad timestamp", func() http.Header { h := header("msg_1", 0, good); h.Set(HeaderTimestamp, "soon"); return h }(), body, ErrBadTimestamp},
		{"missing signature", func() http.Header { h := header("msg_1", now.Unix(), good); h.Del(HeaderSignature); return h }(), body, ErrMissingHeaders},
		{"wrong version only", header("msg_1", now.Unix(), strings.Replace(good, "v1,", "v1a,", 1)), body, ErrNoMatchSignature},
	}
	for _, c := range cases {
		err := verifyAt([]string{testSecret}, c.h, c.body, 0, now)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	p := newPub(t, Config{DefaultURL: srv.URL, Timeout: 200 * time.Millisecond})
	start := time.Now()
	errs := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 1)})
	if errs[0] == nil || errors.As(errs[0], new(*skiplock.PermanentError)) || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("got %v, want a retryable deadline error", errs[0])
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Publish took %v with a 200ms request timeout", d)
	}
}

func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	const limit, total = 3, 20
	var inflight, peak atomic.Int64
	reached := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n >= limit {
			once.Do(func() { close(reached) })
		}
		// Hold every request until the limit has been reached once, so a publisher
		// that sends one at a time would time out here instead of passing.
		select {
		case <-reached:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	p := newPub(t, Config{DefaultURL: srv.URL, MaxConcurrency: limit, Timeout: 5 * time.Second})
	msgs := make([]outbox.Message, total)
	for i := range msgs {
		msgs[i] = outboxtest.NewMessage("", i)
	}
	for i, err := range p.Publish(ctxFor(t), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if got := peak.Load(); got != limit {
		t.Fatalf("peak concurrency %d, want exactly %d", got, limit)
	}
}

func TestDenyPrivateNetworks(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, testSecret)
	port := rcv.srv.Listener.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort().Port()
	p := newPub(t, Config{
		Endpoints: map[string]string{
			"ip":   rcv.url("ip"),
			"name": fmt.Sprintf("http://localhost:%d/name", port),
		},
		DenyPrivateNetworks: true,
	})
	errs := p.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("ip", 1), outboxtest.NewMessage("name", 2)})
	for i, err := range errs {
		if !errors.Is(err, ErrPrivateAddress) || !errors.As(err, new(*skiplock.PermanentError)) {
			t.Errorf("message %d: got %v, want a permanent ErrPrivateAddress", i, err)
		}
	}
	if n := rcv.hits.Load(); n != 0 {
		t.Fatalf("server received %d requests despite DenyPrivateNetworks", n)
	}

	// The same server is reachable with the guard off (the default).
	open := newPub(t, Config{DefaultURL: rcv.url("open")})
	if err := open.Publish(ctxFor(t), []outbox.Message{outboxtest.NewMessage("", 3)})[0]; err != nil {
		t.Fatalf("guard off: %v", err)
	}
}

func TestIsPublic(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr   string
		public bool
	}{
		{"8.8.8.8", true}, {"1.1.1.1", true}, {"2606:4700:4700::1111", true}, {"93.184.216.34", true},
		{"127.0.0.1", false}, {"127.8.9.10", false}, {"::1", false},
		{"10.1.2.3", false}, {"172.16.0.1", false}, {"172.31.255.255", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"fe80::1", false}, {"fd00:ec2::254", false}, {"fc00::1", false},
		{"100.64.0.1", false}, {"0.0.0.0", false}, {"::", false}, {"224.0.0.1", false}, {"ff02::1", false},
		{"255.255.255.255", false}, {"::ffff:127.0.0.1", false}, {"::ffff:10.0.0.1", false},
		{"64:ff9b::a00:1", false}, {"2002:a00:1::", false},
	} {
		if got := isPublic(netip.MustParseAddr(c.addr)); got != c.public {
			t.Errorf("isPublic(%s) = %v, want %v", c.addr, got, c.public)
		}
		err := denyPrivate("tcp", netip.AddrPortFrom(netip.MustParseAddr(c.addr), 443).String(), nil)
		if (err == nil) != c.public {
			t.Errorf("denyPrivate(%s) = %v", c.addr, err)
		}
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no secrets", Config{DefaultURL: "https://example.com"}, "Config.Secrets"},
		{"bad whsec", Config{DefaultURL: "https://example.com", Secrets: []string{"whsec_!!!"}}, "base64"},
		{"empty secret", Config{DefaultURL: "https://example.com", Secrets: []string{""}}, "empty"},
		{"no url", Config{Secrets: []string{"k"}}, "Config.DefaultURL or Config.Endpoints"},
		{"bad scheme", Config{Secrets: []string{"k"}, DefaultURL: "ftp://example.com"}, "http or https"},
		{"no host", Config{Secrets: []string{"k"}, Endpoints: map[string]string{"a": "https:///x"}}, "no host"},
		{"empty name", Config{Secrets: []string{"k"}, Endpoints: map[string]string{"": "https://example.com"}}, "DefaultURL"},
		{"negative", Config{Secrets: []string{"k"}, DefaultURL: "https://example.com", MaxConcurrency: -1}, "negative"},
	} {
		_, err := New(c.cfg)
		if !errors.Is(err, skiplock.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
}

func BenchmarkPublish(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	p, err := New(Config{DefaultURL: srv.URL, Secrets: []string{testSecret}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const batch = 100
	msgs := make([]outbox.Message, batch)
	for i := range msgs {
		msgs[i] = outboxtest.NewMessage("", i)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		for i, err := range p.Publish(ctx, msgs) {
			if err != nil {
				b.Fatalf("message %d: %v", i, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

// A header name HTTP cannot carry would fail every attempt: it is a permanent error
// (parked at once), not 25 retries. Non-ASCII UTF-8 values are sent as they are.
func TestUnsendableHeaderIsPermanent(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, testSecret)
	p := newPub(t, Config{Secrets: []string{testSecret}, DefaultURL: r.url("h")})
	msgs := []outbox.Message{
		{ID: "0190c0de-0000-7000-8000-000000000001", Payload: []byte(`{}`), Headers: map[string]string{"bad name": "v"}},
		{ID: "0190c0de-0000-7000-8000-000000000002", Payload: []byte(`{}`), Headers: map[string]string{"x-colon:": "v"}},
		{ID: "0190c0de-0000-7000-8000-000000000003", Payload: []byte(`{}`), Headers: map[string]string{"x-city": "Zürich"}},
	}
	errs := p.Publish(ctxFor(t), msgs)
	for i := range 2 {
		if !errors.As(errs[i], new(*skiplock.PermanentError)) || !strings.Contains(errs[i].Error(), "header") {
			t.Errorf("message %d: got %v, want a permanent header error", i, errs[i])
		}
	}
	if errs[2] != nil {
		t.Fatalf("UTF-8 header value: %v", errs[2])
	}
}

// With no Logger, the publisher logs to slog.Default() at Warn and above, not to a
// discard handler.
func TestNilLoggerIsSlogDefault(t *testing.T) {
	t.Parallel()
	p, err := New(Config{DefaultURL: "http://127.0.0.1:1/hook", Secrets: []string{testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.log.Enabled(context.Background(), slog.LevelWarn) || p.log.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("the default logger is not slog.Default() at Warn")
	}
}
