//go:build !linux

package pgcluster

import "syscall"

// setPdeathsig does nothing where the kernel has no parent-death signal (macOS): a
// killed process's server is left to Stop or to the next run's cleanup.
func setPdeathsig(*syscall.SysProcAttr, syscall.Signal) {}
