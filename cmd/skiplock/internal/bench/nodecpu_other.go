//go:build !linux

package bench

import "runtime"

// The nodes' CPU is read from /proc (nodecpu_linux.go): elsewhere CN reports its rates
// without the model.

func postmasterPID(string) int { return 0 }

func treeCPU(int) int64 { return -1 }

func selfCPU() int64 { return -1 }

func numCPU() int { return runtime.NumCPU() }
