// Package webhookpub publishes outbox events as signed HTTP webhooks.
//
// Each message is sent as one POST whose body is Message.Payload, to the URL that
// Config.Endpoints maps Message.Destination to (Config.DefaultURL when Destination
// is empty). Requests are signed the Standard Webhooks way:
//
//	webhook-id:        Message.ID
//	webhook-timestamp: the send time, unix seconds
//	webhook-signature: v1,<base64 HMAC-SHA256(secret, id + "." + timestamp + "." + body)>
//
// with one space-separated "v1,..." entry per configured secret, so a receiver can
// rotate secrets without downtime. Receivers check requests with Verify.
//
// Message.Headers are sent as HTTP headers under their own names, without a prefix;
// choose names that do not collide with standard HTTP headers (an "x-" prefix is a
// common convention). The headers this package sets itself (content-type,
// webhook-id, webhook-timestamp, webhook-signature, user-agent) always win over a
// user header of the same name.
//
// Outcomes: a 2xx response means published. A 3xx is a permanent error (redirects
// are never followed: a signed request must not be replayed to a place the sender
// did not choose). 408 and 429 are retried, as are 5xx responses and network
// errors; any other 4xx is permanent (skiplock.Permanent), so the relay parks the
// event at once. A user header whose name is not a valid HTTP field name is a
// permanent error too.
//
// URLs may carry credentials (https://user:password@host/); errors and logs show
// them with the user information masked.
//
// With Config.DenyPrivateNetworks, connections to loopback, private, link-local and
// other non-public addresses are refused. The check runs on the address actually
// dialled, after DNS resolution, so a name that resolves to a public address when
// checked and a private one when used (DNS rebinding) is still refused.
package webhookpub

// The Publisher: its Config, New, Publish and Close, one POST per message, and how
// a response or a transport error becomes a published, retried or permanent outcome.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/failures"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/redact"
	"github.com/skiplock/skiplock/outbox"
)

// Config configures a Publisher. The zero value is not usable: set at least one
// secret and one URL.
type Config struct {
	// Endpoints maps a Message.Destination name to the URL its messages are POSTed
	// to (http or https). Default: none; a message whose Destination is not in the
	// map fails permanently.
	Endpoints map[string]string

	// DefaultURL receives messages whose Destination is empty. Default: "" (such
	// messages fail permanently).
	DefaultURL string

	// Secrets sign every request, one signature per secret (list the new secret
	// alongside the old one while rotating). An entry starting with "whsec_" is
	// the base64 of the key; any other entry is used as raw key bytes. Required:
	// there is no default, unsigned webhooks are not supported.
	Secrets []string

	// Timeout bounds each request, from dial to the end of the response headers
	// and the (discarded) response body. Default: 10s.
	Timeout time.Duration

	// MaxConcurrency bounds the requests one Publish call has in flight. Default: 8.
	MaxConcurrency int

	// DenyPrivateNetworks refuses to connect to loopback, private (RFC 1918, RFC
	// 4193), link-local, CGNAT, multicast and unspecified addresses, checked on the
	// resolved address at dial time. Turn it on when endpoint URLs come from
	// users. Default: false.
	DenyPrivateNetworks bool

	// UserAgent is sent as the user-agent header. Default: "skiplock-webhook".
	UserAgent string

	// Logger receives debug logs of failed deliveries. Default: slog.Default() at level Warn
	// and above, as skiplock.Config.Logger and outbox.RelayConfig.Logger, so the
	// debug lines stay quiet until you pass a logger of your own.
	Logger *slog.Logger
}

// Publisher POSTs outbox messages to webhook endpoints. It is safe for concurrent
// use. Create it with New.
type Publisher struct {
	cfg       Config
	endpoints map[string]*url.URL
	defURL    *url.URL
	secrets   [][]byte
	client    *http.Client
	transport *http.Transport
	log       *slog.Logger
	closed    atomic.Bool
}

var _ outbox.Publisher = (*Publisher)(nil)

// New validates cfg and returns a Publisher. It makes no network calls. An unusable
// cfg returns a *skiplock.ValidationError (errors.Is(err, skiplock.ErrInvalid)).
func New(cfg Config) (*Publisher, error) {
	if len(cfg.Secrets) == 0 {
		return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Secrets", Reason: "empty; set at least one signing secret (raw bytes or \"whsec_<base64>\")"}
	}
	secrets, err := ParseSecrets(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	if len(cfg.Endpoints) == 0 && cfg.DefaultURL == "" {
		return nil, &skiplock.ValidationError{Field: "webhookpub.Config.DefaultURL", Reason: "no URL configured; set Config.DefaultURL or Config.Endpoints"}
	}
	p := &Publisher{cfg: cfg, secrets: secrets, endpoints: make(map[string]*url.URL, len(cfg.Endpoints))}
	for name, raw := range cfg.Endpoints {
		if name == "" {
			return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Endpoints", Reason: "an entry has an empty name; use Config.DefaultURL for messages without a destination"}
		}
		u, err := parseURL(raw)
		if err != nil {
			return nil, &skiplock.ValidationError{Field: fmt.Sprintf("webhookpub.Config.Endpoints[%q]", name), Reason: err.Error()}
		}
		p.endpoints[name] = u
	}
	if cfg.DefaultURL != "" {
		if p.defURL, err = parseURL(cfg.DefaultURL); err != nil {
			return nil, &skiplock.ValidationError{Field: "webhookpub.Config.DefaultURL", Reason: err.Error()}
		}
	}
	if cfg.Timeout < 0 || cfg.MaxConcurrency < 0 {
		return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Timeout", Reason: "Config.Timeout and Config.MaxConcurrency must not be negative; use 0 for the default"}
	}
	if p.cfg.Timeout == 0 {
		p.cfg.Timeout = 10 * time.Second
	}
	if p.cfg.MaxConcurrency == 0 {
		p.cfg.MaxConcurrency = 8
	}
	if p.cfg.UserAgent == "" {
		p.cfg.UserAgent = "skiplock-webhook"
	}
	p.log = failures.Logger(cfg.Logger)

	dialer := &net.Dialer{Timeout: p.cfg.Timeout, KeepAlive: 30 * time.Second}
	if cfg.DenyPrivateNetworks {
		dialer.Control = denyPrivate
	}
	p.transport = &http.Transport{
		// Environment proxies are not used: with a proxy the dial check would see
		// the proxy's address, not the endpoint's.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   p.cfg.MaxConcurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   p.cfg.Timeout,
		ExpectContinueTimeout: time.Second,
	}
	p.client = &http.Client{
		Transport: p.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return p, nil
}

// parseURL checks an endpoint URL. Its errors show the URL with credentials masked.
func parseURL(raw string) (*url.URL, error) {
	shown := strconv.Quote(redact.URL(raw))
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the url.Error's own text repeats the raw URL
		}
		return nil, fmt.Errorf("invalid URL %s: %v", shown, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %s must use http or https", shown)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %s has no host", shown)
	}
	return u, nil
}

// Publish POSTs each message, at most Config.MaxConcurrency at a time, and returns
// one error per message, in order. A nil context or a Publisher not made by New
// fails every message with an error wrapping skiplock.ErrInvalid.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	if p == nil || p.client == nil || ctx == nil {
		return outbox.FailAll(errs, &skiplock.ValidationError{Field: "webhookpub.Publisher", Reason: "nil context, or a Publisher not made by webhookpub.New"})
	}
	if p.closed.Load() {
		return outbox.FailAll(errs, fmt.Errorf("webhookpub: %w", outbox.ErrClosed))
	}
	sem := make(chan struct{}, p.cfg.MaxConcurrency)
	var wg sync.WaitGroup
	for i := range msgs {
		if err := ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("webhookpub: publishing %s: %w", msgs[i].ID, err)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = fmt.Errorf("webhookpub: publishing %s: %w", msgs[i].ID, ctx.Err())
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = p.send(ctx, &msgs[i])
			if errs[i] != nil {
				p.log.Debug("webhookpub: delivery failed", "id", msgs[i].ID, "destination", msgs[i].Destination, "err", errs[i])
			}
		})
	}
	wg.Wait()
	return errs
}

func (p *Publisher) target(dest string) (*url.URL, error) {
	if dest == "" {
		if p.defURL == nil {
			return nil, skiplock.Permanent(errors.New("webhookpub: message has no destination and Config.DefaultURL is not set"))
		}
		return p.defURL, nil
	}
	u, ok := p.endpoints[dest]
	if !ok {
		return nil, skiplock.Permanent(fmt.Errorf("webhookpub: no endpoint named %q; add it to Config.Endpoints", dest))
	}
	return u, nil
}

func (p *Publisher) send(ctx context.Context, m *outbox.Message) error {
	u, err := p.target(m.Destination)
	if err != nil {
		return err
	}
	shown := redact.URL(u.String())
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(m.Payload))
	if err != nil {
		return skiplock.Permanent(fmt.Errorf("webhookpub: building request for %s to %s: %w", m.ID, shown, redact.Error(err, u.String())))
	}
	for k, v := range m.Headers {
		if !validFieldName(k) || !validFieldValue(v) {
			// The transport would refuse the request every time.
			return skiplock.Permanent(fmt.Errorf("webhookpub: header %q of %s is not a valid HTTP header name or value", k, m.ID))
		}
		req.Header.Set(k, v)
	}
	ts := hostclock.Now().Unix()
	req.Header.Set("content-type", "application/json")
	req.Header.Set("user-agent", p.cfg.UserAgent)
	req.Header.Set(HeaderID, m.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(p.secrets, m.ID, ts, m.Payload))

	resp, err := p.client.Do(req)
	if err != nil {
		err = fmt.Errorf("webhookpub: posting %s to %s: %w", m.ID, shown, redact.Error(err, u.String()))
		if errors.Is(err, ErrPrivateAddress) {
			return skiplock.Permanent(err)
		}
		return err
	}
	// Read a little of the body for the error message and let the connection be
	// reused; never read an unbounded body.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return statusError(resp.StatusCode, m.ID, u, snippet)
}

// StatusError is the error for a non-2xx response.
type StatusError struct {
	// StatusCode is the response's HTTP status.
	StatusCode int
	// Body is the start of the response body (at most 256 bytes).
	Body string
}

// Error describes the response: status, and the start of the body if any.
func (e *StatusError) Error() string {
	if e == nil {
		return "webhookpub: <nil StatusError>"
	}
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	return fmt.Sprintf("HTTP %d %s: %q", e.StatusCode, http.StatusText(e.StatusCode), e.Body)
}

func statusError(code int, id string, u *url.URL, body []byte) error {
	if code >= 200 && code < 300 {
		return nil
	}
	err := fmt.Errorf("webhookpub: posting %s to %s: %w", id, redact.URL(u.String()), &StatusError{StatusCode: code, Body: string(body)})
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return err
	case code >= 300 && code < 400:
		return skiplock.Permanent(fmt.Errorf("%w (redirects are not followed; configure the final URL)", err))
	default:
		return skiplock.Permanent(err)
	}
}

// Close releases idle connections. Publish after Close fails with outbox.ErrClosed;
// requests already in flight finish normally. Close is idempotent. Close of a
// Publisher not made by New returns a *skiplock.ValidationError.
func (p *Publisher) Close() error {
	if p == nil || p.transport == nil {
		return &skiplock.ValidationError{Field: "webhookpub.Publisher", Reason: "not made by webhookpub.New"}
	}
	p.closed.Store(true)
	p.transport.CloseIdleConnections()
	return nil
}

// validFieldName reports whether k is an HTTP field name (RFC 9110 token).
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validFieldValue reports whether v can be sent as an HTTP field value: no control
// characters other than tab (outbox.Write already refuses them).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
