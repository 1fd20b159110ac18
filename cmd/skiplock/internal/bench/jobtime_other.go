//go:build !linux

package bench

import "time"

// jobSleep makes a handler last d (jobtime_linux.go says why Linux does otherwise).
func jobSleep(d time.Duration) { time.Sleep(d) }
