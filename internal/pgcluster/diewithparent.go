package pgcluster

import (
	"os/exec"
	"syscall"
)

// DieWithParent asks the kernel to send sig to cmd's process when this process dies
// (Linux; elsewhere it does nothing), so that a helper process started beside a
// demo or a test never outlives it. Call it before cmd.Start.
func DieWithParent(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setPdeathsig(cmd.SysProcAttr, sig)
}
