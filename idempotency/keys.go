package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floe-catalog/floe/fsm"
)

// Proposer replicates a command and returns what Apply returned for it (a
// raftnode.Node, or a wrapper of one). A non-nil error means no Result is
// known.
type Proposer interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
}

// Store is where the records live: the replicated state machine. Propose
// goes through the Raft log; Read is linearizable.
type Store interface {
	Proposer
	Read(ctx context.Context, fn func(*fsm.Reader) error) error
}

// Errors of the keyed-request flow. A key the header carries that is not a
// UUID is ErrInvalidKey (ParseKey); a key bound to another request is an
// error wrapping fsm.ErrKeyReused (the 422 of both servers).
var (
	// ErrUnavailable: the key's records could not be read or written, so
	// nothing was decided for the request, or (Once) the request holding
	// the key's claim has not finished. Retry later.
	ErrUnavailable = errors.New("unavailable")
	// ErrReplayed is wrapped by the error Propose returns when Apply found
	// the key already used by this same request (a duplicate that raced it,
	// on this node or another): nothing was applied. The caller undoes what
	// it prepared and returns the error; Run then answers the request with
	// the stored outcome.
	ErrReplayed = errors.New("idempotent replay")
)

// Config configures Keys.
type Config struct {
	// Lifetime is how long a key is honoured after first use; its record
	// expires Lifetime + Grace after it. Default DefaultLifetime.
	Lifetime time.Duration
	// Now returns the time stamped into records. Default time.Now.
	Now func() time.Time
	// Logger receives the records that could not be written. Default
	// slog.Default().
	Logger *slog.Logger
}

// Keys runs requests that carry an Idempotency-Key against the records in
// one Store. It is safe for concurrent use.
type Keys struct {
	store    Store
	lifetime time.Duration
	now      func() time.Time
	log      *slog.Logger
}

// New returns the keyed-request flow over store. store is used as it is:
// proposals that must be keyed go through Propose, not through store.
func New(store Store, cfg Config) *Keys {
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = DefaultLifetime
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Keys{store: store, lifetime: cfg.Lifetime, now: cfg.Now, log: cfg.Logger}
}

// Key is an Idempotency-Key bound to one request (see Bind).
type Key struct {
	// Key is the key in canonical form (ParseKey).
	Key     string
	Binding fsm.Binding
	// AtMs is when the request was bound, by the Keys' clock; its record
	// expires at ExpiresMs (AtMs + lifetime + Grace).
	AtMs      int64
	ExpiresMs int64
	// recorded is set once a command of the request stored its outcome
	// under the key.
	recorded atomic.Bool
}

// Bind binds key, as ParseKey returned it, to one request: its operation,
// the route's identifiers, the principal and the body (see NewBinding),
// stamped with the current time.
func (k *Keys) Bind(key, op string, route []string, principal string, body []byte) *Key {
	at := k.now()
	return &Key{
		Key:       key,
		Binding:   NewBinding(op, route, principal, body),
		AtMs:      at.UnixMilli(),
		ExpiresMs: at.Add(k.lifetime + Grace).UnixMilli(),
	}
}

// Outcome says what Run did with a request's key, for metrics.
type Outcome int

const (
	// Unrecorded: nothing is stored under the key for this request (it
	// failed in a way that is not stored, or its key could not be read).
	Unrecorded Outcome = iota
	// Recorded: the request ran and its outcome, success or failure, is
	// now stored under its key.
	Recorded
	// Replayed: the request was answered with the outcome stored under its
	// key and did not run (again).
	Replayed
	// Refused: the key is bound to another request; nothing ran.
	Refused
)

// keyCtx carries the *Key of the request being run (see Propose).
type keyCtx struct{}

// Run serves a request with key (from Bind):
//
//  1. A linearizable read looks the key up. A live record bound to the same
//     request answers it: replay(ctx, stored result), and nothing runs. A
//     live record bound to another request refuses it with an error
//     wrapping fsm.ErrKeyReused, and nothing runs.
//  2. Otherwise run(ctx) runs with the key in its context: every command
//     it proposes through Propose is wrapped in fsm.Keyed, so the record is
//     written by the same log entry as the mutation. If Apply finds the key
//     used meanwhile by the same request, run returns Propose's ErrReplayed
//     error and Run answers with replay.
//  3. If run fails without having stored an outcome, and decided (may be
//     nil) turns its error into a Result, that failure was decided from the
//     state (not found, already exists, ...): Run stores it with
//     fsm.RecordOutcome, so that a retry gets the same answer even after the
//     state changed. If it cannot be stored the client still gets run's
//     error; if another request stored the key's outcome first, Run answers
//     with replay instead.
//  4. Before 3, a failed run reads the key again: a record stored
//     meanwhile by the same request sent again (a retry while this one
//     waited) answers this one too, through replay, so that both get the
//     first one's answer and not this run's failure.
//
// The returned error is run's, replay's, an error wrapping fsm.ErrKeyReused
// (Refused), or one wrapping ErrUnavailable and the store's error when the
// look-up failed (nothing ran).
func (k *Keys) Run(ctx context.Context, key *Key, run func(ctx context.Context) error,
	replay func(ctx context.Context, res fsm.Result) error, decided func(err error) (fsm.Result, bool)) (Outcome, error) {
	rec, found, err := k.record(ctx, key.Key)
	if err != nil {
		return Unrecorded, err
	}
	if out, ok, err := k.answered(ctx, key, rec, found, replay); ok {
		return out, err
	}
	ctx = context.WithValue(ctx, keyCtx{}, key)
	err = run(ctx)
	var re *replayError
	if errors.As(err, &re) {
		return Replayed, replay(ctx, re.res)
	}
	if key.recorded.Load() {
		return Recorded, err
	}
	if err == nil {
		return Unrecorded, nil
	}
	// The same request may have run meanwhile, sent again under the key
	// while this one waited (a client's retry after a timeout, on this
	// node or another), and taken effect. This run then failed because
	// it had (a second add of the same snapshot, say), and its error is
	// not the key's answer: the one stored is.
	if rec, found, rerr := k.record(ctx, key.Key); rerr == nil {
		if out, ok, err := k.answered(ctx, key, rec, found, replay); ok {
			return out, err
		}
	}
	if decided == nil {
		return Unrecorded, err
	}
	res, ok := decided(err)
	if !ok {
		return Unrecorded, err
	}
	// Proposed to the store as it is, not through Propose: RecordOutcome
	// is itself the key's record.
	out, perr := k.store.Propose(context.WithoutCancel(ctx), fsm.RecordOutcome{
		Key: key.Key, Binding: key.Binding, AtMs: key.AtMs, ExpiresMs: key.ExpiresMs, Result: res,
	})
	if perr != nil {
		k.log.Warn("could not record idempotent outcome", "key", key.Key, "op", key.Binding.Operation, "error", perr)
		return Unrecorded, err
	}
	if out.Replayed {
		return Replayed, replay(ctx, out)
	}
	if rerr := out.Err(); errors.Is(rerr, fsm.ErrKeyReused) {
		// Another request took the key while this one ran: nothing was
		// recorded, and this request is refused as its retry would be.
		return Refused, rerr
	}
	return Recorded, err
}

// answered answers key from rec, its live record (found), if there is one:
// the stored outcome through replay, or a refusal when the record is bound
// to another request. ok is false when there is no live record.
func (k *Keys) answered(ctx context.Context, key *Key, rec fsm.IdempotencyRecord, found bool,
	replay func(ctx context.Context, res fsm.Result) error) (out Outcome, ok bool, err error) {
	if !found || !rec.Live(key.AtMs) {
		return Unrecorded, false, nil
	}
	if !rec.Binds(key.Binding) {
		return Refused, true, reused(key.Key)
	}
	res, bound := rec.Outcome(key.Binding)
	if !bound { // a digest collision: never another request's outcome
		return Refused, true, reused(key.Key)
	}
	return Replayed, true, replay(ctx, res)
}

// InRun reports whether ctx is that of a keyed request's run (see Run):
// whatever it proposes through Propose records the request's outcome.
// Work that proposes nothing records nothing, so a retry runs it again.
func InRun(ctx context.Context) bool {
	key, _ := ctx.Value(keyCtx{}).(*Key)
	return key != nil
}

// Outside returns ctx outside any keyed request's run: what is proposed
// with it records nothing (InRun is false). For a replay that runs work
// again that changes nothing (Run's replay is called inside the run).
func Outside(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyCtx{}, (*Key)(nil))
}

// Propose proposes cmd to p. Inside Run's run, cmd is wrapped in fsm.Keyed
// with the request's key, so that Apply checks the key and stores the
// outcome in the same log entry; elsewhere it is proposed as it is.
//
// Errors: p's errors unchanged, and one wrapping ErrReplayed when Apply
// found the key already used by this same request (nothing was applied).
// A key used by another request is a Result whose Err wraps
// fsm.ErrKeyReused, as for any domain outcome.
func Propose(ctx context.Context, p Proposer, cmd fsm.Command) (fsm.Result, error) {
	key, _ := ctx.Value(keyCtx{}).(*Key)
	if key == nil {
		return p.Propose(ctx, cmd)
	}
	inner, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	res, err := p.Propose(ctx, fsm.Keyed{
		Key: key.Key, Binding: key.Binding, AtMs: key.AtMs, ExpiresMs: key.ExpiresMs, Command: inner,
	})
	if err != nil {
		return res, err
	}
	if res.Replayed {
		return fsm.Result{}, &replayError{res: res}
	}
	if res.Recorded {
		key.recorded.Store(true)
	}
	return res, nil
}

// record reads what the state machine holds for key, live or not.
func (k *Keys) record(ctx context.Context, key string) (fsm.IdempotencyRecord, bool, error) {
	var (
		rec   fsm.IdempotencyRecord
		found bool
	)
	err := k.store.Read(ctx, func(rd *fsm.Reader) error {
		rec, found = rd.IdempotencyRecord(key)
		return nil
	})
	if err != nil {
		return rec, false, fmt.Errorf("%w: reading Idempotency-Key %s: %w", ErrUnavailable, key, err)
	}
	return rec, found, nil
}

// replayError carries a stored outcome out of a run whose proposal found
// its key already used by the same request.
type replayError struct{ res fsm.Result }

func (e *replayError) Error() string { return ErrReplayed.Error() }
func (e *replayError) Unwrap() error { return ErrReplayed }

// reusedError refuses a key first used with another binding.
type reusedError struct{ key string }

// reused refuses key, whose record was first written for another binding.
func reused(key string) error { return &reusedError{key: key} }

// Error says nothing about the first request, not even its operation: it
// may be another principal's, which the record's one-byte principal tag
// cannot always tell.
func (e *reusedError) Error() string {
	return fmt.Sprintf("Idempotency-Key %s was already used for another request: use a new key for each request", e.key)
}

func (e *reusedError) Unwrap() error { return fsm.ErrKeyReused }
