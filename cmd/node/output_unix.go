//go:build unix

package main

import (
	"os/signal"
	"syscall"
)

// ignoreBrokenPipes makes a write to a closed pipe on standard output or
// error fail with EPIPE instead of killing the process with SIGPIPE.
func ignoreBrokenPipes() { signal.Ignore(syscall.SIGPIPE) }
