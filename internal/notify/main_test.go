package notify

import (
	"testing"

	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
