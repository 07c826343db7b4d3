package main

import (
	"errors"
	"fmt"
	"io"
	"syscall"
)

// exitBrokenPipe is the exit code of a command whose output's reader went
// away (floe purge list | head -1), as a shell reports a process killed by
// SIGPIPE: quietly, as such a command has always ended.
const exitBrokenPipe = 128 + 13

// outputWriter is a command's standard output that remembers the first
// write that failed, so that output lost to a full disk or a closed pipe
// is not a success: a script saving --json output would otherwise keep an
// empty file and exit code 0.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// exitCode is the command's exit code once its output is accounted for:
// code itself when every write succeeded or the command failed anyway;
// otherwise exitBrokenPipe for a reader that went away, and exitFailed,
// with one line on stderr naming the command, for any other failed write.
func (o *outputWriter) exitCode(code int, title string, stderr io.Writer) int {
	if o.err == nil || code != exitOK {
		return code
	}
	if errors.Is(o.err, syscall.EPIPE) {
		return exitBrokenPipe
	}
	fmt.Fprintf(stderr, "%s: writing the output: %v\n", title, o.err)
	return exitFailed
}

// firstArg is args[1], or "" without one.
func firstArg(args []string) string {
	if len(args) < 2 {
		return ""
	}
	return args[1]
}
