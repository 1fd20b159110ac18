package bench

import (
	"syscall"
	"time"
)

// jobSleep makes a handler last d. It blocks its goroutine in nanosleep(2), which
// wakes within tens of microseconds, rather than on a Go timer: the runtime fires
// timers from its scheduler, and under W9b's load a 10 ms timer took 10.53–10.58 ms
// (docs/benchmarks-archive.md), which alone would hold a workload of "10 ms jobs" to 95% of
// its nominal ceiling. A blocking system call hands its P to another thread, so the
// waits cost no worker of the runtime.
func jobSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem // a signal interrupted the wait: sleep what is left
	}
}
