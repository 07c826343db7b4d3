package transport

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrOutcomeUnknown is wrapped by errors from [Client.Call] when the
	// request was completely written but no valid response was received. The
	// handler may or may not have run; the call is not retried.
	ErrOutcomeUnknown = errors.New("transport: outcome unknown: request was sent but no response was received")

	// ErrClosed is returned by operations on a closed [Client] or [Mux].
	ErrClosed = errors.New("transport: closed")

	// ErrFrameTooLarge is returned when a frame exceeds [MaxFrameSize].
	ErrFrameTooLarge = errors.New("transport: frame exceeds maximum size")
)

// Codes set by the transport itself. Handlers may use any other code.
const (
	// CodeInternal: the handler panicked or returned an error that is not a
	// *RemoteError.
	CodeInternal = "internal"
	// CodeDeadlineExceeded: the handler returned context.DeadlineExceeded.
	CodeDeadlineExceeded = "deadline_exceeded"
	// CodeCanceled: the handler returned context.Canceled (for example
	// because the server is shutting down).
	CodeCanceled = "canceled"
)

// RemoteError is an error returned by a remote [Handler]. A handler that
// returns a *RemoteError chooses Code; any other error reaches the caller with
// Code [CodeInternal] (or CodeDeadlineExceeded/CodeCanceled for context
// errors) and its Error() text as Message.
//
// A RemoteError means the server received the request and produced an
// answer: the connection is healthy and the call is not retried.
type RemoteError struct {
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("transport: remote error %s: %s", e.Code, e.Message)
}

// toRemoteError converts a handler's error into what is sent on the wire.
func toRemoteError(err error) *RemoteError {
	var re *RemoteError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, context.DeadlineExceeded):
		return &RemoteError{Code: CodeDeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &RemoteError{Code: CodeCanceled, Message: err.Error()}
	default:
		return &RemoteError{Code: CodeInternal, Message: err.Error()}
	}
}
