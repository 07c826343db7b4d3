package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/floe-catalog/floe/fsm"
)

// Once serves keyed requests whose change is not a state machine command (a
// Raft membership change), so its record cannot ride in the change's log
// entry. The change is claimed before it runs: a record under
// claimKey(key), proposed with fsm.RecordOutcome, whose Apply creates it
// only when no live record holds that key (a duplicate gets Replayed, a
// request with another binding StatusKeyReused). The log orders concurrent
// claims, on this node or any other, so exactly one request runs the change;
// the others wait for its outcome, stored under the key itself once the
// change succeeded, and replay it.
//
// The claim is a lease: it expires ClaimLifetime after it was taken. The
// request holding it gives the look-up and the change changeTimeout and the
// outcome's record recordTimeout, whether or not its client is still there;
// the rest of the lease absorbs clock skew between nodes (a lease's expiry
// is judged by the clock of the node proposing the next claim). If the
// change fails, no outcome is stored and the claim is released
// (fsm.ReleaseClaim): the next retry, or a waiting duplicate, runs the
// change again at once. If the node crashes after claiming, waiting
// duplicates and retries take the claim over once it expired and run the
// change again. Use Once only for changes for which that is harmless.
const (
	changeTimeout = 20 * time.Second
	recordTimeout = 5 * time.Second
	// ClaimLifetime is how long a claim taken by Once lasts.
	ClaimLifetime   = changeTimeout + recordTimeout + 5*time.Second
	claimKeyPrefix  = "membership-claim/"
	pollMinInterval = 10 * time.Millisecond
	pollMaxInterval = 250 * time.Millisecond
)

// claimKey is where the claim on key is recorded. Keys are UUIDs, so no
// client key can be a claim key.
func claimKey(key string) string { return claimKeyPrefix + key }

// keyState is what the state machine holds for a key: its outcome and its
// claim, each when present.
type keyState struct {
	outcome, claim         fsm.IdempotencyRecord
	hasOutcome, hasClaimed bool
}

func (k *Keys) lookup(ctx context.Context, key string) (keyState, error) {
	var ks keyState
	err := k.store.Read(ctx, func(rd *fsm.Reader) error {
		ks.outcome, ks.hasOutcome = rd.IdempotencyRecord(key)
		ks.claim, ks.hasClaimed = rd.IdempotencyRecord(claimKey(key))
		return nil
	})
	if err != nil {
		return ks, fmt.Errorf("%w: reading Idempotency-Key %s: %w", ErrUnavailable, key, err)
	}
	return ks, nil
}

// Once runs change for the first request with key (from Bind; only its key
// and binding count: every claim is stamped with the clock at the attempt)
// and answers every other one with its outcome (replayed true). Only
// successes are stored.
//
// Errors: one wrapping fsm.ErrKeyReused when the key is bound to another
// request; one wrapping ErrUnavailable when the records cannot be read or
// the claim cannot be proposed (nothing ran), or when ctx ends while
// another request holds the claim (the change may still happen; a retry
// gets its outcome); the change's own error when this request ran it and it
// failed (nothing is stored, and a retry runs the change again).
func (k *Keys) Once(ctx context.Context, key *Key, change func(ctx context.Context) error) (replayed bool, err error) {
	b := key.Binding
	wait := pollMinInterval
	for {
		at := k.now()
		ks, err := k.lookup(ctx, key.Key)
		if err != nil {
			return false, err
		}
		if ks.hasOutcome && ks.outcome.Live(at.UnixMilli()) {
			if !ks.outcome.Binds(b) {
				return false, reused(key.Key)
			}
			return true, nil
		}
		if ks.hasClaimed && ks.claim.Live(at.UnixMilli()) {
			if !ks.claim.Binds(b) {
				return false, reused(key.Key)
			}
		} else {
			res, err := k.store.Propose(ctx, fsm.RecordOutcome{
				Key: claimKey(key.Key), Binding: b,
				AtMs: at.UnixMilli(), ExpiresMs: at.Add(ClaimLifetime).UnixMilli(),
			})
			if err != nil {
				return false, fmt.Errorf("%w: claiming Idempotency-Key %s: %v", ErrUnavailable, key.Key, err)
			}
			if res.Status == fsm.StatusOK && !res.Replayed {
				return k.runClaimed(ctx, key.Key, b, at, change)
			}
			// Another request claimed the key first: the next look-up
			// says whether it is a duplicate (wait) or another request
			// (422).
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("%w: Idempotency-Key %s: the first request with it is still in progress (%v); retry to get its outcome",
				ErrUnavailable, key.Key, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, pollMaxInterval)
	}
}

// releaseClaim proposes the release of the claim on key, retrying within
// recordTimeout: a change that failed may have failed because the cluster
// could take no entry just then (a leadership transfer in progress, an
// election), and a release lost to the same cause would keep every retry
// of the request waiting for the claim to expire. Applying a release twice
// is harmless: the second finds no claim.
func (k *Keys) releaseClaim(ctx context.Context, key string, b fsm.Binding, at time.Time) {
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		_, err := k.store.Propose(releaseCtx, fsm.ReleaseClaim{Key: claimKey(key), Binding: b, ClaimedAtMs: at.UnixMilli()})
		if err == nil {
			return
		}
		select {
		case <-releaseCtx.Done():
			k.log.Warn("could not release the Idempotency-Key claim of a failed change", "key", key, "op", b.Operation, "error", err)
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// runClaimed runs change for the request that holds the claim on key
// (taken at time at) and stores its success under key. The change and the
// record do not depend on ctx: duplicates wait for this outcome even if
// this request's client went away. A record that cannot be written is
// logged; the change happened, so the answer is still a success.
func (k *Keys) runClaimed(ctx context.Context, key string, b fsm.Binding, at time.Time, change func(ctx context.Context) error) (replayed bool, err error) {
	changeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), changeTimeout)
	defer cancel()
	// An earlier holder whose claim expired may have stored its outcome
	// after this request's look-up; the claim is in the log now, so this
	// read sees it.
	ks, err := k.lookup(changeCtx, key)
	if err != nil {
		return false, err
	}
	if ks.hasOutcome && ks.outcome.Live(at.UnixMilli()) {
		if !ks.outcome.Binds(b) {
			return false, reused(key)
		}
		return true, nil
	}
	if err := change(changeCtx); err != nil {
		// Nothing is stored for a failure: release the claim so that a
		// retry runs the change at once rather than when the claim
		// expires. A release that does not land leaves that wait.
		k.releaseClaim(ctx, key, b, at)
		return false, err
	}
	// The record's time starts once the change is done, however long it
	// took within changeTimeout.
	recordCtx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	res, err := k.store.Propose(recordCtx, fsm.RecordOutcome{
		Key: key, Binding: b,
		AtMs: at.UnixMilli(), ExpiresMs: at.Add(k.lifetime + Grace).UnixMilli(),
		Result: fsm.Result{Status: fsm.StatusOK},
	})
	switch {
	case err != nil:
		k.log.Warn("could not record the Idempotency-Key of a claimed change", "key", key, "op", b.Operation, "error", err)
	case res.Status == fsm.StatusKeyReused:
		k.log.Warn("the Idempotency-Key of a claimed change was taken by another request meanwhile", "key", key, "op", b.Operation)
	case res.Replayed:
		// A holder whose claim expired finished first: answer as it did.
		return true, nil
	}
	return false, nil
}
