package webhookpub

// Standard Webhooks signing and verification: the header names, secrets
// (ParseSecrets), Sign for the sender and Verify for a receiver, over the one
// implementation in internal/whsign.

import (
	"fmt"
	"net/http"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/hostclock"
	"github.com/skiplock/skiplock/internal/whsign"
)

// Header names set on every request.
const (
	HeaderID        = whsign.HeaderID
	HeaderTimestamp = whsign.HeaderTimestamp
	HeaderSignature = whsign.HeaderSignature
)

// SecretPrefix marks a secret given as base64 text, as Standard Webhooks secrets are
// usually distributed ("whsec_" followed by the base64 of the key bytes).
const SecretPrefix = whsign.SecretPrefix

// ParseSecrets decodes signing secrets as Config.Secrets describes them: "whsec_"
// followed by base64 key bytes, or raw key bytes otherwise. No secrets, an empty one
// or bad base64 return a *skiplock.ValidationError.
func ParseSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Secrets", Reason: "no signing secret given"}
	}
	out := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key, err := whsign.DecodeSecret(s)
		if err != nil {
			return nil, &skiplock.ValidationError{Field: "webhookpub.Config.Secrets", Reason: fmt.Sprintf("secret %d %v", i, err)}
		}
		out = append(out, key)
	}
	return out, nil
}

// Sign returns the webhook-signature header value for one message: a "v1,<base64>"
// entry per key, separated by spaces.
func Sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	return whsign.Sign(keys, id, timestamp, body)
}

// Errors returned by Verify, for a receiver that wants to tell them apart.
var (
	ErrMissingHeaders   = whsign.ErrMissingHeaders
	ErrBadTimestamp     = whsign.ErrBadTimestamp
	ErrTimestampSkew    = whsign.ErrTimestampSkew
	ErrNoMatchSignature = whsign.ErrNoMatchSignature
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
// than the tolerance and ignore repeats: the sender delivers at least once. The
// HTTP gateway's push mode (package gateway) signs the same way: Verify checks its
// requests too.
func Verify(secrets []string, header http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt(secrets, header, body, tolerance, hostclock.Now())
}

func verifyAt(secrets []string, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	keys, err := ParseSecrets(secrets)
	if err != nil {
		return err
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	return whsign.Verify(keys, header, body, tolerance, now)
}
