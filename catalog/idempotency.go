package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/floe-catalog/floe/fsm"
	"github.com/floe-catalog/floe/idempotency"
	"github.com/floe-catalog/floe/internal/storage"
)

// keyedOps are the operations that honour Idempotency-Key: every
// namespace, table and view mutation.
var keyedOps = map[string]bool{
	"createNamespace": true, "dropNamespace": true, "updateProperties": true,
	"createTable": true, "registerTable": true, "updateTable": true, "dropTable": true,
	"unregisterTable": true, "renameTable": true, "commitTransaction": true,
	"createView": true, "registerView": true, "replaceView": true, "dropView": true, "renameView": true,
}

// keyedStore sends every proposal through idempotency.Propose: inside a
// keyed request it is wrapped into fsm.Keyed, so the record is written by the
// same log entry as the mutation.
type keyedStore struct {
	Store
}

func (k keyedStore) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	return idempotency.Propose(ctx, k.Store, cmd)
}

// recordUnchanged stores, under a keyed request's Idempotency-Key, the
// success of a request that changes nothing (a rename onto its own name),
// by proposing a no-op in its name: without a record, a retry would run
// again, and the key could be used for another request. Outside a keyed
// request it does nothing. Errors are those of a proposal: a replay (the
// key's stored answer is then given), a key bound to another request
// (422), or no known outcome.
func (s *Server) recordUnchanged(ctx context.Context) error {
	if !idempotency.InRun(ctx) {
		return nil
	}
	_, err := s.apply(ctx, fsm.Noop{})
	return err
}

// keyed runs h for a request that may carry an Idempotency-Key: it
// validates the key (400), binds it to this request and runs it through
// idempotency.Keys.Run, which answers a retry from the stored outcome (or
// 422 when the key was used for another request) and, after a deterministic
// failure decided before any mutation, records it so the retry sees the
// same answer. 5xx outcomes are never stored.
func (s *Server) keyed(op string, h func(w http.ResponseWriter, r *http.Request) error) func(w http.ResponseWriter, r *http.Request) error {
	kind := opKindOf(op)
	return func(w http.ResponseWriter, r *http.Request) error {
		raw := r.Header.Get(idempotency.Header)
		n := len(r.Header.Values(idempotency.Header))
		if s.cfg.IdempotencyDisabled || n == 0 {
			return h(w, r)
		}
		if raw == "" && n == 1 {
			// A client that meant to send a key and sent none (K=$(cmd)
			// with cmd missing) must not have its retry run twice.
			return badRequest("%s is empty: send a UUID, or no header", idempotency.Header)
		}
		if n > 1 {
			// Which one the client meant is unknown: running under either
			// could answer a retry of the other wrongly.
			return badRequest("%s given %d times: send one", idempotency.Header, n)
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
		if wh := s.whOf(r.Context()); wh.name != "" {
			// The same names in another warehouse are another request. A
			// path variable holds no raw control character, so the root
			// cannot be mistaken for one.
			route = append(route, fsm.WarehouseRoot(wh.name))
		}
		vars := mux.Vars(r)
		for _, v := range []string{"namespace", "table", "view"} {
			if val, ok := vars[v]; ok {
				route = append(route, val)
			}
		}
		bound := body
		if op == "dropTable" {
			// A drop with purge is another request than one without: the
			// key binds the flag too (a bad value is the handler's 400).
			if purge, _ := boolParam(r, "purgeRequested"); purge {
				bound = append(slices.Clip(body), "\x00purgeRequested"...)
			}
		}
		run := func(ctx context.Context) error { return h(w, r.WithContext(ctx)) }
		replay := func(ctx context.Context, res fsm.Result) error {
			// On a request of its own, with the body whole again: the
			// first run may have read it (a duplicate caught when its
			// outcome was proposed is replayed after running), and a
			// replay may decode it (createNamespace echoes what it names).
			rr := r.WithContext(ctx)
			rr.Body = io.NopCloser(bytes.NewReader(body))
			return s.replay(op, w, rr, res)
		}
		decided := func(err error) (fsm.Result, bool) { return deterministicOutcome(err, kind) }
		outcome, err := s.keys.Run(r.Context(), s.keys.Bind(key, op, route, s.principalOf(r), bound), run, replay, decided)
		switch outcome {
		case idempotency.Recorded:
			s.metrics.idemStored.Inc()
		case idempotency.Refused:
			s.metrics.idemConflicts.Inc()
		}
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
		"NoSuchViewException":        fsm.StatusNoSuchView,
		"AlreadyExistsException":     fsm.StatusAlreadyExists,
		"NamespaceNotEmptyException": fsm.StatusNamespaceNotEmpty,
		"CommitFailedException":      fsm.StatusCommitFailed,
	}
	if ae.decided && ae.status == http.StatusBadRequest {
		// Replayed as the same 400 (fsm.ErrInvalidCommand's), its text
		// bounded: it may quote the body.
		return fsm.Result{Status: fsm.StatusInvalid, Message: shortened(ae.msg)}, true
	}
	st, ok := statuses[ae.typ]
	if !ok || ae.status >= 500 {
		return fsm.Result{}, false
	}
	return fsm.Result{Status: st, Message: ae.msg}, true
}

// maxDecidedMessage bounds the text of a 400 stored under a key.
const maxDecidedMessage = 1024

// shortened is msg cut to maxDecidedMessage bytes on a character boundary,
// marked "…" when cut.
func shortened(msg string) string {
	if len(msg) <= maxDecidedMessage {
		return msg
	}
	cut := maxDecidedMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// replay answers a request from a stored outcome: the same status, and a
// body rebuilt from what was stored. Rebuilt bodies may reflect newer state
// (a table loaded now), as the spec allows.
func (s *Server) replay(op string, w http.ResponseWriter, r *http.Request, res fsm.Result) error {
	s.metrics.idemReplays.Inc()
	w.Header().Set("Idempotent-Replayed", "true")
	if err := opOutcomeError(op, res); err != nil {
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
		if len(res.Tables) == 0 && op == "createTable" {
			// A staged create, which stores nothing but the key's
			// record: it changes nothing, so it runs again, outside the
			// key (newTableUUID gives it the first answer's UUID).
			return s.createTable(w, r.WithContext(idempotency.Outside(r.Context())))
		}
		if len(res.Tables) == 0 {
			return fmt.Errorf("stored outcome of %s has no table", op)
		}
		t := res.Tables[0]
		tm, err := s.replayedTable(r, t)
		if err != nil {
			return err
		}
		return s.writeLoadResult(w, r, t.Ident(), tm, false)
	case "updateTable", "unregisterTable":
		if len(res.Tables) == 0 {
			return fmt.Errorf("stored outcome of %s has no table", op)
		}
		tm, err := s.replayedTable(r, res.Tables[0])
		if err != nil {
			return err
		}
		if op == "updateTable" { // as the first answer: an unregister's has none
			setETag(w, tm.location)
		}
		writeJSON(w, http.StatusOK, commitTableResponse{MetadataLocation: tm.location, Metadata: tm.raw})
	case "createView", "registerView", "replaceView":
		if len(res.Views) == 0 {
			return fmt.Errorf("stored outcome of %s has no view", op)
		}
		vm, err := s.readViewMetadata(r.Context(), res.Views[0].MetadataLocation)
		if err != nil {
			return err
		}
		writeLoadViewResult(w, vm)
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
	default: // dropNamespace, renameTable, commitTransaction, dropView, renameView
		w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

// replayedTable reads, for a replay, the metadata file the keyed request
// produced for t. When that file is gone (a later commit deleted it under
// write.metadata.delete-after-commit.enabled, or a purge did), the answer
// is built from the table now at t's identifier, as the spec allows ("may
// reflect a newer state of the catalog"); when there is none, or the name
// now holds a table at another location, 404 NoSuchTableException. Any other failure to read is returned as it is.
func (s *Server) replayedTable(r *http.Request, t fsm.Table) (*tableMetadata, error) {
	// From storage, not the cache: whether the file is gone (a purge
	// deleted it) decides the answer, and a node that cached it must
	// answer as one that did not.
	tm, err := s.readMetadataFile(r.Context(), t.MetadataLocation)
	if err == nil || !errors.Is(err, storage.ErrNotFound) {
		return tm, err
	}
	cur, err := s.lookupTable(r, t.Ident())
	if err != nil {
		return nil, err
	}
	if !storage.IsWithin(cur.Location, t.MetadataLocation) {
		// Not the table the request changed: the name was dropped and
		// taken again elsewhere. (One re-created at the same location
		// cannot be told apart: records do not keep the table's UUID.)
		return nil, notFoundTable("table %s, which the request with this Idempotency-Key changed, no longer exists", t.Ident())
	}
	return s.readMetadata(r.Context(), cur.MetadataLocation)
}

// PruneIdempotency runs while this node leads: it proposes, with the
// leader's clock, the removal of expired Idempotency-Key records.
func (s *Server) PruneIdempotency(ctx context.Context) {
	if s.cfg.IdempotencyDisabled {
		return
	}
	every := max(min(s.cfg.IdempotencyLifetime/4, time.Minute), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// One entry deletes at most pruneBatch records; while entries come
		// back full there is more to delete (at a high keyed request rate
		// a tick's worth of expired records exceeds one batch), so go on,
		// at most maxPruneRounds entries per tick.
		total := 0
		for range maxPruneRounds {
			res, err := s.store.Propose(ctx, fsm.PruneIdempotency{NowMs: s.cfg.Now().UnixMilli(), Limit: pruneBatch})
			if err != nil {
				s.log.Warn("pruning idempotency records failed", "error", err)
				break
			}
			total += res.Count
			s.metrics.idemPruned.Add(float64(res.Count))
			if res.Count < pruneBatch {
				break
			}
		}
		if total > 0 {
			s.log.Info("pruned expired idempotency records", "records", total)
		}
	}
}

// Idempotency record pruning: records per prune entry, and entries per
// tick (a minute at most), so up to 1M expired records a minute go.
const (
	pruneBatch     = 10000
	maxPruneRounds = 100
)
