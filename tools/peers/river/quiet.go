package main

import (
	"log/slog"
	"os"
)

// quiet keeps River's warnings and errors (on stderr) and drops its routine logging,
// so the figures are the output.
func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
