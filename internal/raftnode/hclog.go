package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogAdapter sends hashicorp/raft's logs (an hclog.Logger) to slog. The
// slog handler decides what is printed: SetLevel is ignored and the Is*
// methods ask the handler.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLog(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{l: l, name: name}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// attrs turns hclog's key/value arguments into slog's. hclog.Format values
// (hclog.Fmt) are rendered here because slog would print them as slices.
func (a *hclogAdapter) attrs(args []any) []any {
	out := make([]any, 0, len(a.implied)+len(args)+2)
	if a.name != "" {
		out = append(out, "logger", a.name)
	}
	for _, list := range [][]any{a.implied, args} {
		for _, v := range list {
			if f, ok := v.(hclog.Format); ok && len(f) > 0 {
				if s, ok := f[0].(string); ok {
					v = fmt.Sprintf(s, f[1:]...)
				}
			}
			out = append(out, v)
		}
	}
	return out
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	for _, v := range args {
		if err, ok := v.(error); ok && errors.Is(err, errForeignPeer) {
			// Raft says so at every heartbeat; checkPeerCluster's own
			// error line, once a minute, tells the operator.
			lv = slog.LevelDebug
		}
		if err, ok := v.(error); ok && errors.Is(err, raft.ErrNothingNewToSnapshot) {
			// A snapshot asked for with nothing applied since the last
			// (replaceDamagedSnapshot asks every second until there is):
			// nothing failed.
			lv = slog.LevelDebug
		}
	}
	if !a.l.Enabled(context.Background(), lv) {
		return
	}
	a.l.Log(context.Background(), lv, msg, a.attrs(args)...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return a.l.Enabled(context.Background(), slogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any{}, a.implied...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if a.enabled(lv) {
			return lv
		}
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(a.l.With("logger", a.name).Handler(), slog.LevelInfo)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
