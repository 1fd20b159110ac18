package gateway_test

import (
	"testing"

	"github.com/skiplock/skiplock/skiplocktest"
)

func TestMain(m *testing.M) { skiplocktest.Main(m) }
