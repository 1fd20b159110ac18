// Package whsign is the one implementation of Standard Webhooks signing
// (https://www.standardwebhooks.com): the header names, the secrets' text form, the
// sender's signature and the receiver's check. The webhook publisher
// (outbox/webhookpub) and the HTTP gateway's push mode (gateway) both sign with it.
package whsign

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
)

// Header names set on every signed request.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a secret given as base64 text, as Standard Webhooks secrets are
// usually distributed ("whsec_" followed by the base64 of the key bytes).
const SecretPrefix = "whsec_"

// DecodeSecret returns the key bytes of one secret: the base64 after SecretPrefix,
// or the text itself otherwise. An empty key or bad base64 is an error naming why.
func DecodeSecret(s string) ([]byte, error) {
	key := []byte(s)
	if rest, ok := strings.CutPrefix(s, SecretPrefix); ok {
		var err error
		if key, err = base64.StdEncoding.DecodeString(rest); err != nil {
			return nil, fmt.Errorf("starts with %q but is not valid base64 after it: %v", SecretPrefix, err)
		}
	}
	if len(key) == 0 {
		return nil, errors.New("is empty; use a random key of at least 24 bytes")
	}
	return key, nil
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

// SetHeaders signs body and sets the three headers on h.
func SetHeaders(h http.Header, keys [][]byte, id string, timestamp int64, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(timestamp, 10))
	h.Set(HeaderSignature, Sign(keys, id, timestamp, body))
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
	ErrMissingHeaders   = errors.New("webhook: webhook-id, webhook-timestamp or webhook-signature header missing")
	ErrBadTimestamp     = errors.New("webhook: webhook-timestamp is not a unix time in seconds")
	ErrTimestampSkew    = errors.New("webhook: webhook-timestamp is outside the tolerance")
	ErrNoMatchSignature = errors.New("webhook: no signature matches")
)

// Verify checks a received message at now: its timestamp within tolerance of now
// (either way) and at least one v1 signature of the webhook-signature header made
// with one of keys over the raw body.
func Verify(keys [][]byte, header http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	id, tsText, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if id == "" || tsText == "" || sigs == "" {
		return ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ErrBadTimestamp
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
