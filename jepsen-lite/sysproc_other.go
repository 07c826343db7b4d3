//go:build !linux

package main

import "syscall"

// sysProcAttr: without Pdeathsig, children of a harness that crashes must be
// stopped by hand.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
