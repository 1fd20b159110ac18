package webhookpub

// Standard Webhooks signing and verification: the header names, secrets
// (ParseSecrets), Sign for the sender and Verify for a receiver.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
)

// Header names set on every request.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a secret given as base64 text, as Standard Webhooks secrets are
// usually distributed ("whsec_" followed by the base64 of the key bytes).
const SecretPrefix = "whsec_"

// ParseSecrets decodes signing secrets as Config.Secrets describes them: "whsec_"
// followed by base64 key bytes, or raw key bytes otherwise. No secrets, an empty one
// or bad base64 return a *skiplock.ValidationError.
func ParseSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Secrets", Reason: "no signing secret given"}
	}
	out := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key := []byte(s)
		if rest, ok := strings.CutPrefix(s, SecretPrefix); ok {
			var err error
			if key, err = base64.StdEncoding.DecodeString(rest); err != nil {
				return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Secrets", Reason: fmt.Sprintf("secret %d starts with %q but is not valid base64 after it: %v", i, SecretPrefix, err)}
			}
		}
		if len(key) == 0 {
			return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Secrets", Reason: fmt.Sprintf("secret %d is empty; use a random key of at least 24 bytes", i)}
		}
		out = append(out, key)
	}
	return out, nil
}

// Sign returns the webhook-signature header value for one message: a "v1,<base64>"
// entry per key, separated by spaces.
func Sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	var b strings.Builder
	ts := strconv.FormatInt(timestamp, 10)
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac(key, id, ts, body)))
	}
	return b.String()
}

func mac(key []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors returned by Verify, for a receiver that wants to tell them apart.
var (
	ErrMissingHeaders   = errors.New("webhookpub: webhook-id, webhook-timestamp or webhook-signature header missing")
	ErrBadTimestamp     = errors.New("webhookpub: webhook-timestamp is not a unix time in seconds")
	ErrTimestampSkew    = errors.New("webhookpub: webhook-timestamp is outside the tolerance")
	ErrNoMatchSignature = errors.New("webhookpub: no signature matches")
)

// DefaultTolerance is the timestamp tolerance Verify uses when given 0.
const DefaultTolerance = 5 * time.Minute

// Verify checks a received webhook: that its timestamp is within tolerance of now
// (either way; 0 means DefaultTolerance) and that at least one v1 signature in the
// webhook-signature header matches one of secrets (given as in Config.Secrets).
// body must be the raw request body, unparsed. It returns nil when the request is
// authentic; no secrets (or an unusable one) return a *skiplock.ValidationError.
//
// A receiver should also remember webhook-id values it has processed for longer
// than the tolerance and ignore repeats: the sender delivers at least once.
func Verify(secrets []string, header http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt(secrets, header, body, tolerance, hostclock.Now())
}

func verifyAt(secrets []string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	keys, err := ParseSecrets(secrets)
	if err != nil {
		return err
	}
	id, tsText, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if skew := now.Sub(time.Unix(ts, 0)).Abs(); skew > tolerance {
		return fmt.Errorf("%w (%v off, tolerance %v)", ErrTimestampSkew, skew.Round(time.Second), tolerance)
	}
	for _, entry := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		for _, key := range keys {
			if hmac.Equal(got, mac(key, id, tsText, body)) {
				return nil
			}
		}
	}
	return ErrNoMatchSignature
}
