//go:build !unix

package harness

import "syscall"

// Without SIGSTOP and SIGCONT, Pause and Continue fail: the operating
// system refuses the made-up signals below.
const (
	sigStop = syscall.Signal(-19)
	sigCont = syscall.Signal(-18)
)
