package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/health"
	"github.com/spf13/cobra"
)

func newServeCmd(db *dbFlags) *cobra.Command {
	var (
		listen, tokensFile, pushSecret, publicURL string
		listenURL                                 string
		tokens, pushes                            []string
		maxBody, maxClaim, pushConcurrency, conns int
		maxWait, poll, lease, pushTimeout, pushCB time.Duration
		pollOnly                                  bool
	)
	cmd := &cobra.Command{
		Use:   "serve [--listen 127.0.0.1:8090] [--token worker:token[:queue,…]]… [--push queue=url --push-secret s]",
		Short: "serve the HTTP worker gateway: workers in any language claim and finish jobs as JSON",
		Long: `Serve the HTTP worker gateway for a schema until SIGINT or SIGTERM (docs/gateway.md):
workers in any language claim jobs (a long poll that costs no query while it waits),
renew their leases and complete, fail, snooze or cancel them as JSON over HTTP, each
call fenced by the job's lease token. The routes are described by the OpenAPI
document the gateway serves at /openapi.json; /healthz and /readyz are the probes.

Each worker authenticates with a bearer token of its own, given as
--token worker:token (at least 16 characters), optionally limited to some queues:
--token billing-py:$TOKEN:billing,invoices. Tokens can come from a file instead
(--tokens-file, one worker:token[:queues] a line, # comments) or from
$SKIPLOCK_GATEWAY_TOKENS (entries separated by spaces), out of sight of other users
of the host. Without any token the gateway serves everyone, and so listens only on
a loopback address.

Push mode: --push queue=https://… POSTs every job of the queue to the URL, signed
with --push-secret (Standard Webhooks; default $SKIPLOCK_PUSH_SECRET), renewing its
lease while the receiver works; the reply is the outcome, or 202 and a later call
of the routes (--public-url tells receivers where the gateway is).

Run it as the worker role of docs/roles.md.`,
		Args: noArgs,
		Example: `  skiplock serve --token mailer-py:$(openssl rand -hex 16)
  curl -s localhost:8090/v1/claim -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" \
    -d '{"queue":"default","limit":10,"wait_ms":30000}'`,
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", "127.0.0.1:8090", "listen address; beyond loopback only with tokens")
	fs.StringArrayVar(&tokens, "token", nil, "a worker's bearer token as `worker:token[:queue,…]` (repeatable; default $SKIPLOCK_GATEWAY_TOKENS)")
	fs.StringVar(&tokensFile, "tokens-file", "", "read worker:token[:queue,…] entries from this `file`, one a line")
	intFlag(cmd, &maxBody, "max-body", gateway.DefaultMaxBodyBytes, 1<<10, 64<<20, "the largest request body in bytes")
	intFlag(cmd, &maxClaim, "max-claim", gateway.DefaultMaxClaim, 1, gateway.DefaultMaxClaimBatch, "the most jobs one claim request may ask for")
	durationFlag(cmd, &maxWait, "max-wait", gateway.DefaultMaxWait, "the longest wait_ms a claim request may ask for (at most 5m)")
	durationFlag(cmd, &poll, "poll-interval", gateway.DefaultPollInterval, "the safety-net claim of a queue that requests wait on")
	fs.BoolVar(&pollOnly, "poll-only", false, "no LISTEN connection (behind PgBouncer in transaction mode): waiting claims find jobs at the next poll")
	fs.StringVar(&listenURL, "listen-url", "", "behind PgBouncer in transaction pooling mode: `url` of PostgreSQL itself for the LISTEN connection (for an HA pair: every node, target_session_attrs=read-write), instead of --poll-only")
	durationFlag(cmd, &lease, "lease", 30*time.Second, "how long a claim or a heartbeat leases a job for")
	intFlag(cmd, &conns, "max-conns", 10, 2, 1000, "the most database connections")
	fs.StringArrayVar(&pushes, "push", nil, "push the jobs of a queue to a URL, as `queue=url` (repeatable)")
	fs.StringVar(&pushSecret, "push-secret", "", "the push requests' signing secret, whsec_… or raw (default $SKIPLOCK_PUSH_SECRET)")
	intFlag(cmd, &pushConcurrency, "push-concurrency", gateway.DefaultPushConcurrency, 1, 10000, "jobs of each push queue in flight at once")
	durationFlag(cmd, &pushTimeout, "push-timeout", gateway.DefaultPushTimeout, "the longest a push request may take")
	durationFlag(cmd, &pushCB, "push-callback-timeout", gateway.DefaultPushCallbackTimeout, "how long a job answered 202 waits for its outcome")
	fs.StringVar(&publicURL, "public-url", "", "the gateway's base URL as push receivers reach it (sent as callback_url)")

	var opts gateway.Options
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		entries := tokens
		if env := os.Getenv("SKIPLOCK_GATEWAY_TOKENS"); len(entries) == 0 && env != "" {
			entries = strings.Fields(env)
		}
		if tokensFile != "" {
			fromFile, err := readTokensFile(tokensFile)
			if err != nil {
				return usagef(cmd, "serve: --tokens-file: %v", err)
			}
			entries = append(entries, fromFile...)
		}
		opts = gateway.Options{MaxBodyBytes: int64(maxBody), MaxClaim: maxClaim, MaxWait: maxWait,
			PollInterval: poll, PollOnly: pollOnly, ListenURL: listenURL, PublicURL: publicURL, Logger: db.logger(cmd)}
		for _, e := range entries {
			t, err := parseToken(e)
			if err != nil {
				return usagef(cmd, "serve: --token %s", err)
			}
			opts.Tokens = append(opts.Tokens, t)
		}
		opts.Unauthenticated = len(opts.Tokens) == 0
		if err := refuseOpenListener(cmd, "listen", listen, !opts.Unauthenticated, "--token, --tokens-file or $SKIPLOCK_GATEWAY_TOKENS"); err != nil {
			return err
		}
		if maxWait < time.Second || maxWait > gateway.MaxMaxWait {
			return usagef(cmd, "serve: --max-wait %s: want 1s to %s", maxWait, gateway.MaxMaxWait)
		}
		if poll < time.Millisecond || lease < time.Second {
			return usagef(cmd, "serve: --poll-interval wants 1ms or more, --lease 1s or more")
		}
		if pushSecret == "" {
			pushSecret = os.Getenv("SKIPLOCK_PUSH_SECRET")
		}
		if len(pushes) > 0 && pushSecret == "" {
			return usagef(cmd, "serve: --push needs --push-secret (or $SKIPLOCK_PUSH_SECRET): receivers check the signature")
		}
		for _, p := range pushes {
			q, u, ok := strings.Cut(p, "=")
			if !ok || q == "" || u == "" {
				return usagef(cmd, "serve: --push %q: want queue=url", p)
			}
			opts.Push = append(opts.Push, gateway.PushTarget{Queue: q, URL: u, Secrets: []string{pushSecret},
				Concurrency: pushConcurrency, Timeout: pushTimeout, CallbackTimeout: pushCB})
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		pool, err := db.pool(cmd, int32(conns))
		if err != nil {
			return err
		}
		defer pool.Close()
		c, err := skiplock.NewClient(pool, skiplock.Config{Schema: db.schemaName(), Logger: db.logger(cmd), LeaseDuration: lease})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := refuseUnmigrated(ctx, c); err != nil {
			return err
		}
		g, err := gateway.New(c, opts)
		if err != nil {
			return usagef(cmd, "serve: %v", err)
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("serve: listening on %s: %w", listen, err)
		}
		if err := g.Start(ctx); err != nil {
			ln.Close()
			return err
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Stop(stopCtx); err != nil {
				db.logger(cmd).Warn("serve: stopping the gateway", "error", err)
			}
		}()
		mux := http.NewServeMux()
		probes := health.Handler(c, health.Options{SkipQueues: true})
		mux.Handle("GET /healthz", probes)
		mux.Handle("GET /readyz", probes)
		mux.Handle("/", g)
		// No WriteTimeout: a claim's long poll holds its request up to --max-wait.
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
		auth := fmt.Sprintf("%d worker token(s)", len(opts.Tokens))
		if opts.Unauthenticated {
			auth = "no authentication (loopback only)"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "serving the worker gateway on http://%s/ for schema %s; %s; %d push target(s); the API at /openapi.json\n",
			ln.Addr(), c.Schema(), auth, len(opts.Push))
		return serveUntilDone(ctx, srv, ln)
	}
	return cmd
}

// parseToken reads one worker:token[:queue,…] entry.
func parseToken(entry string) (gateway.Token, error) {
	parts := strings.SplitN(entry, ":", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return gateway.Token{}, fmt.Errorf("%q: want worker:token or worker:token:queue,…", redactToken(entry))
	}
	t := gateway.Token{Worker: parts[0], Token: parts[1]}
	if len(t.Token) < gateway.MinTokenLen {
		return gateway.Token{}, fmt.Errorf("of worker %s is %d characters: use at least %d (random)", t.Worker, len(t.Token), gateway.MinTokenLen)
	}
	if len(parts) == 3 {
		for _, q := range strings.Split(parts[2], ",") {
			if q = strings.TrimSpace(q); q != "" {
				t.Queues = append(t.Queues, q)
			}
		}
		if len(t.Queues) == 0 {
			return gateway.Token{}, fmt.Errorf("of worker %s names no queue after its second colon", t.Worker)
		}
	}
	return t, nil
}

// redactToken keeps an entry's worker name and hides the rest.
func redactToken(entry string) string {
	if w, _, ok := strings.Cut(entry, ":"); ok {
		return w + ":…"
	}
	return "…"
}

// readTokensFile reads token entries, one a line; blank lines and # comments are
// skipped.
func readTokensFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}
