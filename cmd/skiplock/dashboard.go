package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/skiplock/skiplock/dashboard"
	"github.com/skiplock/skiplock/health"
	"github.com/skiplock/skiplock/outbox"
	"github.com/spf13/cobra"
)

// minTokenLen is the shortest --token accepted: a guessable token on a listener
// beyond loopback would be worse than none.
const minTokenLen = 16

func newDashboardCmd(db *dbFlags) *cobra.Command {
	var (
		listen, basicAuth, token, basePath string
		readOnly, redact                   bool
		refresh                            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "dashboard [--listen 127.0.0.1:8080] [--token t | --basic-auth user:pass]",
		Short: "serve the web dashboard: queues, jobs, schedules, outbox; retry, cancel, delete, pause",
		Long: `Serve the web dashboard for a schema until SIGINT or SIGTERM (docs/dashboard.md).

Without --token or --basic-auth the dashboard is read-only and listens only on a
loopback address; with either, every request must authenticate (the token as
"Authorization: Bearer <token>" or through the login form) and signed-in users may
act on jobs, queues, schedules and outbox events, unless --read-only.

The token and the credentials can come from the environment instead of the command
line (where other users of the host can see them): $SKIPLOCK_DASHBOARD_TOKEN,
$SKIPLOCK_DASHBOARD_BASIC_AUTH.

Run it as the read-only dashboard role of docs/roles.md to only look; actions need
the worker role's grants, outbox requeues the relay role's.`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", "127.0.0.1:8080", "listen address; beyond loopback only with --token or --basic-auth")
	fs.StringVar(&token, "token", "", "require this bearer token (at least 16 characters; default $SKIPLOCK_DASHBOARD_TOKEN)")
	fs.StringVar(&basicAuth, "basic-auth", "", "require HTTP basic authentication as `user:password` (default $SKIPLOCK_DASHBOARD_BASIC_AUTH)")
	fs.BoolVar(&readOnly, "read-only", false, "allow no action, even to authenticated users")
	fs.BoolVar(&redact, "redact-payloads", false, `show job arguments and outputs, schedule and outbox payloads as "redacted"`)
	fs.StringVar(&basePath, "base-path", "", "serve under this path (behind a reverse proxy that keeps it), e.g. /skiplock")
	durationFlag(cmd, &refresh, "refresh", 5*time.Second, "how often pages refresh their figures in place (0: never)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if token == "" {
			token = os.Getenv("SKIPLOCK_DASHBOARD_TOKEN")
		}
		if basicAuth == "" {
			basicAuth = os.Getenv("SKIPLOCK_DASHBOARD_BASIC_AUTH")
		}
		if token != "" && len(token) < minTokenLen {
			return usagef(cmd, "dashboard: --token is %d characters: use at least %d (random)", len(token), minTokenLen)
		}
		if basicAuth != "" {
			u, p, ok := strings.Cut(basicAuth, ":")
			if !ok || u == "" || p == "" {
				return usagef(cmd, "dashboard: --basic-auth wants user:password")
			}
		}
		if err := refuseOpenListener(cmd, "listen", listen, token != "" || basicAuth != "", "--token or --basic-auth"); err != nil {
			return err
		}
		if basePath != "" && !strings.HasPrefix(basePath, "/") {
			return usagef(cmd, "dashboard: --base-path %q must start with /", basePath)
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		c, done, err := db.client(cmd, 4)
		if err != nil {
			return err
		}
		defer done()
		if err := refuseUnmigrated(ctx, c); err != nil {
			return err
		}
		ob, err := outbox.New(c, outbox.Config{})
		if err != nil {
			return err
		}
		authed := token != "" || basicAuth != ""
		opts := dashboard.Options{Token: token, BasePath: basePath, RedactPayloads: redact, RefreshInterval: refresh,
			Logger: db.logger(cmd)}
		if refresh == 0 {
			opts.RefreshInterval = -1
		}
		if basicAuth != "" {
			opts.BasicUser, opts.BasicPassword, _ = strings.Cut(basicAuth, ":")
		}
		if authed && !readOnly {
			// Every request is authenticated by now: a signed-in user may do anything
			// but see redacted payloads.
			opts.Authorize = func(_ *http.Request, action string) bool {
				return action != dashboard.ActionViewPayloads
			}
		}
		h, err := dashboard.New(c, ob, opts)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("dashboard: listening on %s: %w", listen, err)
		}
		// The container probes, outside the dashboard's authentication and base path:
		// they tell whether the database answers, not how the queues fare.
		mux := http.NewServeMux()
		probes := health.Handler(c, health.Options{SkipQueues: true})
		mux.Handle("GET /healthz", probes)
		mux.Handle("GET /readyz", probes)
		mux.Handle("/", h)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		mode := "read-only (give --token or --basic-auth to allow actions)"
		switch {
		case authed && readOnly:
			mode = "read-only (--read-only)"
		case authed:
			mode = "actions allowed to authenticated users"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "serving the dashboard on http://%s%s/ for schema %s; %s\n",
			ln.Addr(), strings.TrimRight(basePath, "/"), c.Schema(), mode)
		return serveUntilDone(ctx, srv, ln)
	}
	return cmd
}

// refuseOpenListener is the rule of every command that serves HTTP with
// authentication (dashboard, serve): listening beyond this host needs it. addr is
// the --flag's host:port; authed says whether the command line gave credentials,
// how names the flags that give them. A malformed address and an unauthenticated
// one beyond loopback are usage errors.
func refuseOpenListener(cmd *cobra.Command, flag, addr string, authed bool, how string) error {
	host, err := listenHost(cmd, flag, addr)
	if err != nil {
		return err
	}
	if !authed && !loopback(host) {
		return usagef(cmd, "%s: --%s %s is reachable beyond this host: give %s (or listen on 127.0.0.1)", pathOf(cmd), flag, addr, how)
	}
	return nil
}

// loopback reports whether host names only this machine: a loopback IP or
// "localhost". An empty host (every interface) and other names do not.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
