package main

import "syscall"

// sysProcAttr makes the kernel kill a child (floe node, versitygw) if the
// harness dies without stopping it, so nothing it started outlives a run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
