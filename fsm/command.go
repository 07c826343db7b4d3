package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
)

// CommandType identifies a domain command in the Raft log. The top bit
// (IgnorableFlag) marks a command that an older binary may skip instead of
// treating the entry as corruption.
type CommandType uint8

// IgnorableFlag set on a command type tells a state machine that does not know
// the type to skip the entry rather than panic. Only commands whose loss leaves
// the catalog correct (metrics, hints) may carry it.
const IgnorableFlag CommandType = 0x80

// Command types. The numbers are part of the log format: never reuse one.
const (
	TypeCreateNamespace CommandType = 1
	TypeDropNamespace   CommandType = 2
	TypeUpdateNamespace CommandType = 3
	TypeCommitTables    CommandType = 4
	TypeDropTable       CommandType = 5
	TypeRenameTable     CommandType = 6
	TypeNoop            CommandType = 7

	// Purge jobs (see purge.go): 8–19.
	// Idempotency records (see idempotency.go): 20–29.
	typeUnknownForTests  CommandType = 0x7f
	typeIgnorableForTest CommandType = 0x7e | IgnorableFlag
)

// Command is a domain command: what a proposer wants the state machine to do.
// Every field the state machine needs (time, UUIDs, file names) is stamped by
// the proposer so that applying it is deterministic.
type Command interface {
	Type() CommandType
}

// Errors returned by Decode.
var (
	// ErrUnknownCommand is returned for a type byte the registry does not know.
	ErrUnknownCommand = errors.New("fsm: unknown command type")
	// ErrBadEncoding is returned for an entry too short or a body that does not decode.
	ErrBadEncoding = errors.New("fsm: undecodable command")
)

// registration binds a command type to the newest body version this binary
// writes (a versioned command may write an older one),
// a decoder for every version it can read, and the function that applies it.
type registration struct {
	version uint8
	decode  func(version uint8, body []byte) (Command, error)
	apply   func(tx *txn, cmd Command) Result
}

var registry = map[CommandType]registration{}

// register adds a command to the registry. It is called from init functions
// only; registering a type twice is a programming error.
func register(t CommandType, r registration) {
	if _, ok := registry[t]; ok {
		panic(fmt.Sprintf("fsm: command type %d registered twice", t))
	}
	// A malformed command (see validate.go) is refused before it is
	// applied, wherever it is applied from (a batch or inside Keyed). A
	// command that changed the catalog records its events (events.go) in
	// the same transaction.
	apply := r.apply
	r.apply = func(tx *txn, c Command) Result {
		if v, ok := c.(checker); ok {
			if res, bad := v.check(); bad {
				return res
			}
		}
		res := apply(tx, c)
		tx.recordEvents(c, res)
		return res
	}
	registry[t] = r
}

// jsonCodec returns a decoder for commands whose bodies are JSON of type T.
// Versions newer than max are rejected: this binary cannot know their meaning.
func jsonCodec[T Command](max uint8) func(uint8, []byte) (Command, error) {
	return func(v uint8, body []byte) (Command, error) {
		if v == 0 || v > max {
			return nil, fmt.Errorf("%w: body version %d not supported (max %d)", ErrBadEncoding, v, max)
		}
		var c T
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadEncoding, err)
		}
		return c, nil
	}
}

// Encode serialises a command as a log entry: type byte, body version byte,
// then the JSON body.
func Encode(c Command) ([]byte, error) {
	reg, ok := registry[c.Type()]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownCommand, c.Type())
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("fsm: encode command %d: %w", c.Type(), err)
	}
	version := reg.version
	if v, ok := c.(versioned); ok {
		if version = v.bodyVersion(); version == 0 || version > reg.version {
			return nil, fmt.Errorf("fsm: encode command %d: body version %d, registered up to %d", c.Type(), version, reg.version)
		}
	}
	out := make([]byte, 0, len(body)+2)
	out = append(out, byte(c.Type()), version)
	return append(out, body...), nil
}

// versioned is a command that writes an older body version than its
// registration's newest when it does not need the newer meaning, so that
// replicas not yet upgraded keep reading it.
type versioned interface {
	bodyVersion() uint8
}

// Decode parses a log entry written by Encode. An entry of an unknown type
// returns ErrUnknownCommand; the caller decides whether the ignorable flag
// lets it skip the entry.
func Decode(b []byte) (Command, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: entry of %d bytes", ErrBadEncoding, len(b))
	}
	t := CommandType(b[0])
	reg, ok := registry[t]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownCommand, t)
	}
	return reg.decode(b[1], b[2:])
}
