package harness

import "syscall"

// sysProcAttr makes the kernel kill a child if the process that started it
// dies without stopping it (a test timeout, a crashed tool), so no child
// outlives a run.
//
// Pdeathsig fires when the OS thread that started the child exits; the Go
// runtime keeps its threads, so in practice that is when the parent exits.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
