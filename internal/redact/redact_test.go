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
		// A password holding '?', '#', '/', '@' or ',' (raw or percent-encoded).
		"amqp://user:pa?ss@host/vhost":                     "amqp://xxxxx@host/vhost",
		"amqp://user:pa#ss@host/vhost":                     "amqp://xxxxx@host/vhost",
		"amqp://user:p%2Fss%40x@host/vhost":                "amqp://xxxxx@host/vhost",
		"amqp://user:pa,ss@host/vhost":                     "amqp://xxxxx@host/vhost",
		"https://u:pa/ss@hooks.example.com/in?x=1":         "https://xxxxx@hooks.example.com/in?x=1",
		"kafka://u:p@k1:9092,k2:9092/topic":                "kafka://xxxxx@k1:9092,k2:9092/topic",
		"kafka://k1:9092,k2:9092/topic":                    "kafka://k1:9092,k2:9092/topic",
		"nats://u:p@[::1]:4222":                            "nats://xxxxx@[::1]:4222",
		"nats://n1:4222,u:p@n2:4222":                       "nats://xxxxx@n2:4222", // as ambiguous as "nats://u:a,b@n2": over-masked
		"nats://n1:4222, nats://u:p@n2:4222":               "nats://n1:4222, nats://xxxxx@n2:4222",
		"orders=https://u:p@hooks.example.com/orders":      "orders=https://xxxxx@hooks.example.com/orders",
		"https://hooks.example.com/in?next=https://u:p@x/": "https://hooks.example.com/in?next=https://xxxxx@x/",
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
	// A ',' in the password does not split the URL as a list would.
	raw = "amqp://relay:pa,ss@rabbit/"
	if err := Error(fmt.Errorf("dialling %s: boom", raw), raw); strings.Contains(err.Error(), "pa,") || !strings.Contains(err.Error(), "xxxxx@rabbit") {
		t.Fatalf("password left in %q", err)
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
		// pgx reads a query value up to the next '&': '#' is part of it.
		{"postgres://db/shop?sslpassword=secret#frag", "postgres://db/shop?sslpassword=xxxxx"},
		{"amqp://guest:guest@rabbit:5672/", "amqp://guest:xxxxx@rabbit:5672/"},
		{"nats://token@nats:4222", "nats://token@nats:4222"},
		// A password holding '?' or '#': pgx (like libpq) ends the userinfo at
		// the first '@' before a '/', so it connects with "pa?ss".
		{"postgres://postgres:pa?ss@127.0.0.1:1/postgres", "postgres://postgres:xxxxx@127.0.0.1:1/postgres"},
		{"postgres://postgres:pa#ss@127.0.0.1:1/postgres", "postgres://postgres:xxxxx@127.0.0.1:1/postgres"},
		{"postgresql://app:pa?s#s@db/shop?sslmode=require", "postgresql://app:xxxxx@db/shop?sslmode=require"},
		{"postgres://app:p?a/s@s#x@db:5432/shop", "postgres://app:xxxxx@db:5432/shop"},
		{"postgres://app:p%2Fss%40x%3F@db/shop", "postgres://app:xxxxx@db/shop"},
		{"postgres://app:a://b@db/shop", "postgres://app:xxxxx@db/shop"}, // "://" in a password is no second URL
		{"postgres://app:pa ss@db/shop", "postgres://app:xxxxx@db/shop"},
		{"postgres://app@db/shop?sslmode=require", "postgres://app@db/shop?sslmode=require"},
		// A '?' after the host starts the query; it is not part of a password.
		{"postgres://app:secret@db/shop?sslmode=require&application_name=a?b", "postgres://app:xxxxx@db/shop?sslmode=require&application_name=a?b"},
		{"postgres://db/shop?application_name=a?b", "postgres://db/shop?application_name=a?b"},
		{"postgres://app@db/shop?application_name=me@laptop", "postgres://app@db/shop?application_name=me@laptop"},
		// An '@' in the query of a URL with a password is over-masked, never leaked.
		{"postgres://app:secret@db/shop?application_name=me@laptop&password=s2", "postgres://app:xxxxx@laptop&password=xxxxx"},
		{"postgres://db/shop?password=se?cret&sslmode=disable", "postgres://db/shop?password=xxxxx&sslmode=disable"},
		{"postgres://db/shop?password=a,b://c&sslmode=disable", "postgres://db/shop?password=xxxxx&sslmode=disable"},
		{"postgres://db/shop?password= a://b", "postgres://db/shop?password=xxxxx"},     // pgx trims the space
		{"postgres://db/shop?pass%77ord=secret", "postgres://db/shop?pass%77ord=xxxxx"}, // pgx decodes the key
		{"postgres://db/shop?Password=secret", "postgres://db/shop?Password=xxxxx"},
		{"postgres://db/shop?password=", "postgres://db/shop?password=xxxxx"},
		// IPv6 hosts
		{"postgres://app:secret@[::1]:5432/shop", "postgres://app:xxxxx@[::1]:5432/shop"},
		{"postgres://app:pa?ss@[::1]/shop", "postgres://app:xxxxx@[::1]/shop"},
		{"postgres://app@[::1]:5432/shop", "postgres://app@[::1]:5432/shop"},
		{"postgres://[::1]:5432/shop", "postgres://[::1]:5432/shop"},
		// other schemes
		{"amqp://guest:gu?est@rabbit:5672/", "amqp://guest:xxxxx@rabbit:5672/"},
		{"nats://u:p/w@nats:4222", "nats://u:xxxxx@nats:4222"},
		{"kafka://u:p#w@k1:9092,k2:9092/topic", "kafka://u:xxxxx@k1:9092,k2:9092/topic"},
		{"https://u:p?w@hooks.example.com/in?x=1", "https://u:xxxxx@hooks.example.com/in?x=1"},
		{"https://hooks.example.com/in?x=1", "https://hooks.example.com/in?x=1"},
		// URLs inside a longer message
		{"dial postgres://a:s1@h1/db failed; then postgresql://b:s?2@h2/db: refused", "dial postgres://a:xxxxx@h1/db failed; then postgresql://b:xxxxx@h2/db: refused"},
		{"cannot parse `postgres://u:pa?ss@h/db`: invalid port", "cannot parse `postgres://u:xxxxx@h/db`: invalid port"},
		{"from postgres://h1/db to postgres://u:pw@h2/db", "from postgres://h1/db to postgres://u:xxxxx@h2/db"},
		{"error:postgres://u:pw@h/db", "error:postgres://u:xxxxx@h/db"},
		{"://u:pw@h/db", "://u:xxxxx@h/db"},
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
		// Backslash escapes (libpq): "\ " and "\'" do not end an unquoted value,
		// and a quoted value may hold "\'" and "\\".
		{`host=127.0.0.1 password=x\ y`, "host=127.0.0.1 password=xxxxx"},
		{`host=127.0.0.1 password=x\ y dbname=shop`, "host=127.0.0.1 password=xxxxx dbname=shop"},
		{`host=x password=it\'s user=u`, "host=x password=xxxxx user=u"},
		{`host=x password='it\'s a \\ secret' user=u`, "host=x password=xxxxx user=u"},
		{`host=x password='a\\' user=u`, "host=x password=xxxxx user=u"},
		{`host=x password=secret\`, "host=x password=xxxxx"},
		{`host=x password='unterminated secret`, "host=x password=xxxxx"},
		{`host=x sslpassword=a\ b sslmode=require`, "host=x sslpassword=xxxxx sslmode=require"},
		{`host=x application_name='a b' password=secret`, "host=x application_name='a b' password=xxxxx"},
		{`host=x application_name=a\ b password=secret`, "host=x application_name=a\\ b password=xxxxx"},
		// Every libpq space separates, and a value may end the string.
		{"host=x\rpassword=secret", "host=x\rpassword=xxxxx"},
		{"host=x\tpassword=secret\nuser=u", "host=x\tpassword=xxxxx\nuser=u"},
		{"host=x\vpassword=secret\fuser=u", "host=x\vpassword=xxxxx\fuser=u"},
		{"host=x password=", "host=x password=xxxxx"},
		{"host=x password= user=u", "host=x password= xxxxx"}, // libpq reads "user=u" as the password
		// libpq matches keywords case-sensitively (pgx sends PASSWORD=… to the
		// server as a run-time parameter): masking every case hides more, never less.
		{"host=x Password=secret", "host=x Password=xxxxx"},
		// A URL inside a value does not hide the keyword form.
		{"host=x application_name=http://app password=secret", "host=x application_name=http://app password=xxxxx"},
		// A keyword/value string quoted in a message.
		{"cannot parse `password=secret host=x`: invalid", "cannot parse `password=xxxxx host=x`: invalid"},
		{"cannot parse `host='x password=secret`: unterminated", "cannot parse `host='x password=xxxxx unterminated"},
		{"", ""},
	} {
		if got := DSN(tc.in); got != tc.want {
			t.Errorf("DSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
