package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
)

// keyedOps are the operations that honour Idempotency-Key: every table-side
// mutation the spec marks with the header.
var keyedOps = map[string]bool{
	"createNamespace": true, "dropNamespace": true, "updateProperties": true,
	"createTable": true, "registerTable": true, "updateTable": true, "dropTable": true,
	"unregisterTable": true, "renameTable": true, "commitTransaction": true,
}

// principal is who the request acts for; part of a key's binding. floe has
// no authentication yet, so every request is the same principal.
const principal = "anonymous"

// keyInfo is the Idempotency-Key of the request being served.
type keyInfo struct {
	key       string
	binding   fsm.Binding
	atMs      int64
	expiresMs int64
	// recorded is set once a command of this request stored its outcome
	// under the key.
	recorded atomic.Bool
}

type keyCtx struct{}

func keyFrom(ctx context.Context) *keyInfo {
	ki, _ := ctx.Value(keyCtx{}).(*keyInfo)
	return ki
}

// replayedError carries a stored outcome out of a handler whose proposal
// found its key already used for the same request (a concurrent or earlier
// duplicate). The handler cleans up as for any failure; wrap then answers
// with the replay.
type replayedError struct{ res fsm.Result }

func (e *replayedError) Error() string { return "idempotent replay" }

// keyedStore wraps every proposal of a keyed request into fsm.Keyed, so the
// record is written by the same log entry as the mutation.
type keyedStore struct {
	Store
}

func (k keyedStore) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	ki := keyFrom(ctx)
	if ki == nil {
		return k.Store.Propose(ctx, cmd)
	}
	inner, err := fsm.Encode(cmd)
	if err != nil {
		return fsm.Result{}, err
	}
	res, err := k.Store.Propose(ctx, fsm.Keyed{
		Key: ki.key, Binding: ki.binding, AtMs: ki.atMs, ExpiresMs: ki.expiresMs, Command: inner,
	})
	if err != nil {
		return res, err
	}
	if res.Replayed {
		return fsm.Result{}, &replayedError{res: res}
	}
	if res.Recorded {
		ki.recorded.Store(true)
	}
	return res, nil
}

// keyed runs h for a request that may carry an Idempotency-Key: it
// validates the key (400), binds it to this request, answers a retry from
// the stored outcome (or 422 when the key was used for another request),
// and after a deterministic failure decided before any mutation records it
// so the retry sees the same answer. 5xx outcomes are never stored.
func (s *Server) keyed(op string, h func(w http.ResponseWriter, r *http.Request) error) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		raw := r.Header.Get(idempotency.Header)
		if s.cfg.IdempotencyDisabled || raw == "" {
			return h(w, r)
		}
		key, version, err := idempotency.ParseKey(raw)
		if err != nil {
			return badRequest("%v", err)
		}
		if version != 7 {
			s.metrics.idemNonV7.Inc()
		}
		body, err := readBody(r)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		route := []string{}
		vars := mux.Vars(r)
		for _, v := range []string{"namespace", "table"} {
			if val, ok := vars[v]; ok {
				route = append(route, val)
			}
		}
		b := idempotency.NewBinding(op, route, principal, body)
		now := s.cfg.Now().UnixMilli()
		ki := &keyInfo{
			key:       key,
			binding:   fsm.Binding{Operation: b.Operation, Route: b.Route, Principal: b.Principal, BodyDigest: b.BodyDigest},
			atMs:      now,
			expiresMs: now + (s.cfg.IdempotencyLifetime + idempotency.Grace).Milliseconds(),
		}
		// A retry of a finished request is answered from its record
		// without doing anything again.
		var rec fsm.IdempotencyRecord
		var found bool
		if err := s.store.Read(r.Context(), func(rd *fsm.Reader) error {
			rec, found = rd.IdempotencyRecord(key)
			return nil
		}); err != nil {
			return err
		}
		if found && rec.Live(now) {
			if rec.Binding != ki.binding {
				s.metrics.idemConflicts.Inc()
				return unprocessable("Idempotency-Key %s was already used for %s on another request (%s)",
					key, rec.Binding.Operation, idempotency.Binding{Operation: rec.Binding.Operation, Route: rec.Binding.Route,
						Principal: rec.Binding.Principal, BodyDigest: rec.Binding.BodyDigest}.Describe(b))
			}
			return s.replay(op, w, r, rec.Result)
		}
		r = r.WithContext(context.WithValue(r.Context(), keyCtx{}, ki))
		err = h(w, r)
		var re *replayedError
		if errors.As(err, &re) {
			return s.replay(op, w, r, re.res)
		}
		if err == nil {
			if ki.recorded.Load() {
				s.metrics.idemStored.Inc()
			}
			return nil
		}
		if ki.recorded.Load() {
			s.metrics.idemStored.Inc()
			return err
		}
		res, ok := deterministicOutcome(err, opKindOf(op))
		if !ok {
			return err
		}
		// Record the failure so a retry gets the same answer; if the record
		// cannot be written the client still gets the original answer.
		// Proposed directly, not through the keyed store: RecordOutcome is
		// itself the key's record.
		out, perr := s.direct.Propose(context.WithoutCancel(r.Context()), fsm.RecordOutcome{
			Key: key, Binding: ki.binding, AtMs: ki.atMs, ExpiresMs: ki.expiresMs, Result: res,
		})
		if perr != nil {
			s.log.Warn("could not record idempotent outcome", "key", key, "op", op, "error", perr)
			return err
		}
		if out.Replayed {
			return s.replay(op, w, r, out)
		}
		s.metrics.idemStored.Inc()
		return err
	}
}

// deterministicOutcome turns a failure decided from the catalog's state
// (not found, already exists, not empty, requirement failed, being purged)
// into a Result to store. Bad input (400/413/422) is not stored: the
// binding covers the body, so a retry fails the same way anyway; 5xx never
// is.
func deterministicOutcome(err error, kind opKind) (fsm.Result, bool) {
	ae := toAPIError(err, kind)
	if ae.contended {
		return fsm.Result{}, false
	}
	statuses := map[string]fsm.Status{
		"NoSuchNamespaceException":   fsm.StatusNoSuchNamespace,
		"NoSuchTableException":       fsm.StatusNoSuchTable,
		"AlreadyExistsException":     fsm.StatusAlreadyExists,
		"NamespaceNotEmptyException": fsm.StatusNamespaceNotEmpty,
		"CommitFailedException":      fsm.StatusCommitFailed,
	}
	st, ok := statuses[ae.typ]
	if !ok || ae.status >= 500 {
		return fsm.Result{}, false
	}
	return fsm.Result{Status: st, Message: ae.msg}, true
}

// replay answers a request from a stored outcome: the same status, and a
// body rebuilt from what was stored. Rebuilt bodies may reflect newer state
// (a table loaded now), as the spec allows.
func (s *Server) replay(op string, w http.ResponseWriter, r *http.Request, res fsm.Result) error {
	s.metrics.idemReplays.Inc()
	w.Header().Set("Idempotent-Replayed", "true")
	if err := outcomeError(op, res); err != nil {
		return err
	}
	switch op {
	case "createNamespace":
		var req namespaceBody
		if err := decodeBody(r, &req); err != nil {
			return err
		}
		if req.Properties == nil {
			req.Properties = map[string]string{}
		}
		writeJSON(w, http.StatusOK, req)
	case "updateProperties":
		if res.Properties == nil {
			return fmt.Errorf("stored outcome of %s has no properties", op)
		}
		writeJSON(w, http.StatusOK, res.Properties)
	case "createTable", "registerTable":
		if len(res.Tables) == 0 {
			return fmt.Errorf("stored outcome of %s has no table", op)
		}
		tm, err := s.readMetadata(r.Context(), res.Tables[0].MetadataLocation)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, s.loadResult(tm, false))
	case "updateTable", "unregisterTable":
		if len(res.Tables) == 0 {
			return fmt.Errorf("stored outcome of %s has no table", op)
		}
		tm, err := s.readMetadata(r.Context(), res.Tables[0].MetadataLocation)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, commitTableResponse{MetadataLocation: tm.location, Metadata: tm.raw})
	case "dropTable":
		// A replayed synchronous purge waits for the job as the first
		// request did (the job is found by the dropped table).
		purge, _ := boolParam(r, "purgeRequested")
		if purge && !asyncPurgeRequested(r) && len(res.Tables) > 0 {
			p, err := s.purger()
			if err != nil {
				return err
			}
			if err := s.awaitPurge(r.Context(), p, "", res.Tables[0]); err != nil {
				return err
			}
		}
		w.WriteHeader(http.StatusNoContent)
	default: // dropNamespace, renameTable, commitTransaction
		w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

// PruneIdempotency runs while this node leads: it proposes, with the
// leader's clock, the removal of expired Idempotency-Key records.
func (s *Server) PruneIdempotency(ctx context.Context) {
	if s.cfg.IdempotencyDisabled {
		return
	}
	every := min(s.cfg.IdempotencyLifetime/4, time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := s.store.Propose(ctx, fsm.PruneIdempotency{NowMs: s.cfg.Now().UnixMilli()})
		if err != nil {
			s.log.Warn("pruning idempotency records failed", "error", err)
			continue
		}
		if res.Count > 0 {
			s.metrics.idemPruned.Add(float64(res.Count))
			s.log.Info("pruned expired idempotency records", "records", res.Count)
		}
	}
}
