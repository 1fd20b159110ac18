package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"amqp://relay:s3cret@rabbit:5672/prod":    "amqp://xxxxx@rabbit:5672/prod",
		"nats://t0ken@n1:4222,nats://u:p@n2:4222": "nats://xxxxx@n1:4222,nats://xxxxx@n2:4222",
		"https://hooks.example.com/in?x=a@b":      "https://xxxxx@b", // over-masked, never leaked
		"https://hooks.example.com/in":            "https://hooks.example.com/in",
		"amqp://user:p@ss#w/rd@host/vhost":        "amqp://xxxxx@host/vhost",
		"amqp://user:pa ss@host/":                 "amqp://xxxxx@host/",
		"no url at all":                           "no url at all",
		"user:pw@host:4222":                       "xxxxx@host:4222",
	}
	for in, want := range cases {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	raw := "amqp://relay:s3cr\"et@rabbit/"
	_, perr := url.Parse(raw + "%zz")
	sentinel := errors.New("sentinel")
	err := Error(fmt.Errorf("dialling %s: %w (%w)", raw, perr, sentinel), raw)
	if strings.Contains(err.Error(), "s3cr") || !strings.Contains(err.Error(), "xxxxx@rabbit") {
		t.Fatalf("password left in %q", err)
	}
	if !errors.Is(err, sentinel) {
		t.Fatal("errors.Is lost the wrapped error")
	}
	if Error(nil, raw) != nil {
		t.Fatal("nil error not nil")
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		// URL form
		{"postgres://app:secret@db:5432/shop", "postgres://app:xxxxx@db:5432/shop"},
		{"postgresql://app:secret@db/shop?sslmode=require", "postgresql://app:xxxxx@db/shop?sslmode=require"},
		{"postgres://app@db/shop", "postgres://app@db/shop"},
		{"postgres://db/shop", "postgres://db/shop"},
		{"postgres://app:p%40ss@h1:5432,h2:5432/shop", "postgres://app:xxxxx@h1:5432,h2:5432/shop"},
		{"postgres://app:pa/ss@db/shop", "postgres://app:xxxxx@db/shop"}, // '/' in an unescaped password
		{"postgres://app:p@ss@db/shop", "postgres://app:xxxxx@db/shop"},  // '@' in an unescaped password
		{"postgres://app:@db/shop", "postgres://app:xxxxx@db/shop"},      // an empty password is still a password field
		{"postgres://db/shop?user=app&password=secret&sslmode=disable", "postgres://db/shop?user=app&password=xxxxx&sslmode=disable"},
		{"postgres://db/shop?sslpassword=secret#frag", "postgres://db/shop?sslpassword=xxxxx#frag"},
		{"amqp://guest:guest@rabbit:5672/", "amqp://guest:xxxxx@rabbit:5672/"},
		{"nats://token@nats:4222", "nats://token@nats:4222"},
		// keyword/value form
		{"host=x password=secret", "host=x password=xxxxx"},
		{"host=x password=secret dbname=shop", "host=x password=xxxxx dbname=shop"},
		{"password=secret", "password=xxxxx"},
		{"host=x password = secret user=u", "host=x password = xxxxx user=u"},
		{`host=x password='se cr\'et' user=u`, "host=x password=xxxxx user=u"},
		{"host=x sslpassword=secret", "host=x sslpassword=xxxxx"},
		{"host=x PASSWORD=secret", "host=x PASSWORD=xxxxx"},
		{"host=x user=password", "host=x user=password"},
		{"host=x passwordfile=/etc/pw", "host=x passwordfile=/etc/pw"},
		{"", ""},
	} {
		if got := DSN(tc.in); got != tc.want {
			t.Errorf("DSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
