package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

// Output lost to a full disk fails the command with one line; output whose
// reader went away (| head) ends it as SIGPIPE would have, quietly; a
// command that failed keeps its own code.
func TestCommandOutputThatCannotBeWritten(t *testing.T) {
	for _, tc := range []struct {
		err      error
		code     int
		want     int
		stderrOK func(string) bool
	}{
		{syscall.ENOSPC, exitOK, exitFailed, func(s string) bool {
			return bytes.Contains([]byte(s), []byte("floe members: writing the output: no space left on device"))
		}},
		{fmt.Errorf("write /dev/stdout: %w", syscall.EPIPE), exitOK, exitBrokenPipe, func(s string) bool { return s == "" }},
		{syscall.ENOSPC, exitUnavailable, exitUnavailable, func(s string) bool { return s == "" }},
		{nil, exitOK, exitOK, func(s string) bool { return s == "" }},
	} {
		out := &outputWriter{w: failingWriter{tc.err}}
		if tc.err == nil {
			out.w = &bytes.Buffer{}
		}
		fmt.Fprintln(out, "a line")
		fmt.Fprintln(out, "another")
		var stderr bytes.Buffer
		assert.Equal(t, tc.want, out.exitCode(tc.code, "floe members", &stderr), "%v", tc.err)
		assert.True(t, tc.stderrOK(stderr.String()), "%v: %q", tc.err, stderr.String())
	}
}

// An interrupt is exit 130 whatever error it broke off, a failure with a
// code of its own included (a retry's wait reports the last failure).
func TestInterruptWinsOverTheFailureItBrokeOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := fmt.Errorf("%w: %w", &cliFailure{code: exitUnavailable, msg: "no answer"}, ctx.Err())
	assert.Equal(t, exitInterrupted, cliExitCode(ctx, err))
	assert.Equal(t, exitUnavailable, cliExitCode(context.Background(), &cliFailure{code: exitUnavailable, msg: "no answer"}))
	assert.Equal(t, exitFailed, cliExitCode(context.Background(), errors.New("other")))
}
