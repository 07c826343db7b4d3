package testenv

import "syscall"

// sysProcAttr kills the server if the test binary dies without cleaning up
// (for example on a test timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
