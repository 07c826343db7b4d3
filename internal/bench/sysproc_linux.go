package bench

import "syscall"

// sysProcAttr makes the kernel kill a node if the driver dies without
// stopping it (for example on a test timeout), so no node outlives a run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
