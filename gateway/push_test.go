package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/gateway"
	"github.com/skiplock/skiplock/outbox/webhookpub"
	"github.com/skiplock/skiplock/skiplocktest"
)

// Push mode: the gateway POSTs each job of the queue to the receiver, signed so that
// webhookpub.Verify accepts it, and takes the outcome from the reply (complete with
// an output, complete on an empty 2xx, fail, retry on a 500) or from a later call of
// the routes (202), renewing the lease while the receiver works.
func TestPush(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("push-secret-0123456789abcdef"))
	var (
		gatewayURL atomic.Value // string: the gateway's address, known once it listens
		badSigs    atomic.Int64
		seen       sync.Map // kind → *atomic.Int64 deliveries
		release    = make(chan struct{})
	)
	count := func(kind string) int64 {
		v, _ := seen.LoadOrStore(kind, &atomic.Int64{})
		return v.(*atomic.Int64).Load()
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhookpub.Verify([]string{secret}, r.Header, body, 0); err != nil || r.Header.Get("X-Receiver-Key") != "k1" {
			badSigs.Add(1)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var pr gateway.PushRequest
		if err := json.Unmarshal(body, &pr); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		v, _ := seen.LoadOrStore(pr.Job.Kind, &atomic.Int64{})
		v.(*atomic.Int64).Add(1)
		switch pr.Job.Kind {
		case "reply":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"outcome":"complete","output":{"pushed":true}}`))
		case "empty":
			w.WriteHeader(http.StatusNoContent)
		case "fail":
			_, _ = w.Write([]byte(`{"outcome":"fail","error":"receiver says no","permanent":true}`))
		case "broken":
			http.Error(w, "receiver broke", http.StatusInternalServerError)
		case "slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusOK)
		case "later":
			w.WriteHeader(http.StatusAccepted)
			go func() { // the outcome comes through the routes, under the lease token
				req, _ := http.NewRequest("POST", gatewayURL.Load().(string)+"/v1/jobs/"+pr.Job.ID+"/complete",
					strings.NewReader(`{"lease_token":"`+pr.Job.LeaseToken+`","output":"later"}`))
				req.Header.Set("Authorization", "Bearer "+workerToken)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
	}))
	t.Cleanup(receiver.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	e := newEnv(t, skiplock.Config{LeaseDuration: 2 * time.Second, RetryPolicy: fixedRetry(time.Hour)}, gateway.Options{
		Push: []gateway.PushTarget{{Queue: "push", URL: receiver.URL, Secrets: []string{secret},
			Header: http.Header{"X-Receiver-Key": []string{"k1"}}}},
	})
	gatewayURL.Store(e.srv.URL)
	ids := map[string]string{}
	for _, kind := range []string{"reply", "empty", "fail", "broken", "later", "slow"} {
		ids[kind] = e.enqueue("push", kind, `{}`, nil)
	}
	final := func(id string, want skiplock.JobState) func() bool {
		return func() bool { return e.job(id).State == want }
	}
	waitFor(t, "the pushed reply's completion", final(ids["reply"], skiplock.StateSucceeded))
	waitFor(t, "the empty reply's completion", final(ids["empty"], skiplock.StateSucceeded))
	waitFor(t, "the failure", final(ids["fail"], skiplock.StateFailed))
	waitFor(t, "the 500's retry", func() bool {
		j := e.job(ids["broken"])
		return j.State == skiplock.StatePending && j.Attempt == 1
	})
	waitFor(t, "the callback's completion", final(ids["later"], skiplock.StateSucceeded))

	if got := e.job(ids["reply"]); string(got.Output) != `{"pushed": true}` {
		t.Errorf("reply output %s", got.Output)
	}
	if got := e.job(ids["later"]); string(got.Output) != `"later"` {
		t.Errorf("callback output %s", got.Output)
	}
	if got := e.job(ids["fail"]); got.LastError != "receiver says no" {
		t.Errorf("failure's error %q", got.LastError)
	}
	if got := e.job(ids["broken"]); !strings.Contains(got.LastError, "500") || !strings.Contains(got.LastError, "receiver broke") {
		t.Errorf("the 500's error %q", got.LastError)
	}

	// The slow receiver holds its job past the 2s lease: the gateway renews it.
	first := e.job(ids["slow"]).LeaseUntil
	waitFor(t, "the slow job's lease to be renewed past its first expiry", func() bool {
		j := e.job(ids["slow"])
		return j.State == skiplock.StateRunning && j.LeaseUntil.After(first.Add(time.Second))
	})
	close(release)
	waitFor(t, "the slow job's completion", final(ids["slow"], skiplock.StateSucceeded))

	for kind := range ids {
		if n := count(kind); n != 1 {
			t.Errorf("%s was delivered %d times", kind, n)
		}
	}
	if n := badSigs.Load(); n != 0 {
		t.Errorf("%d requests failed the signature check", n)
	}
}

// A receiver that answers 202 and never reports fails the attempt after the
// target.s CallbackTimeout.
func TestPushCallbackTimeout(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(receiver.Close)
	c := skiplocktest.NewClient(t, skiplock.Config{RetryPolicy: fixedRetry(time.Hour)})
	e := startEnv(t, c, gateway.Options{Unauthenticated: true, Push: []gateway.PushTarget{{Queue: "push", URL: receiver.URL,
		Secrets: []string{"raw-secret-0123456789"}, CallbackTimeout: 100 * time.Millisecond}}})
	id := e.enqueue("push", "k", `{}`, nil)
	waitFor(t, "the attempt to fail after the callback timeout", func() bool {
		j := e.job(id)
		return j.State == skiplock.StatePending && j.Attempt == 1
	})
	if got := e.job(id); !strings.Contains(got.LastError, "no outcome came within 100ms") {
		t.Fatalf("error %q", got.LastError)
	}
}
