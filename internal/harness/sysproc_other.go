//go:build !linux

package harness

import "syscall"

// sysProcAttr: only Linux has Pdeathsig; elsewhere the children of a parent
// that dies without stopping them must be stopped by hand.
func sysProcAttr() *syscall.SysProcAttr { return nil }
