package pgcluster

import "syscall"

// setPdeathsig asks Linux to send sig to the child when this process dies, so that a
// killed test or demo leaves no server behind.
func setPdeathsig(a *syscall.SysProcAttr, sig syscall.Signal) { a.Pdeathsig = sig }
