package fsm

import "fmt"

// Limits on what a command may ask the state machine to store. bbolt
// refuses empty keys and keys over 32 KiB, and a refused write inside Apply
// can only panic, on every replica, again at every replay. So a command
// whose keys would break those rules is refused up front with
// StatusInvalid, before anything is written. The proposer (the catalog)
// refuses such requests first, with 400; these checks are the state
// machine's own guarantee, whatever a proposer sends.
const (
	// maxIdentBytes bounds a namespace key or a table key.
	maxIdentBytes = 8 << 10
	// maxLocationBytes bounds a location and its key.
	maxLocationBytes = 8 << 10
	// maxIDBytes bounds Idempotency-Keys, purge job ids and node ids.
	maxIDBytes = 1 << 10
	// maxFormerLocations bounds the locations one table has moved away
	// from and still owns (Table.FormerLocations): every commit to the
	// table rewrites its index entries.
	maxFormerLocations = 32
	// MaxFormerLocations is maxFormerLocations for proposers.
	MaxFormerLocations = maxFormerLocations
)

// checker is implemented by commands that can be refused as malformed
// before they are applied.
type checker interface {
	check() (Result, bool)
}

func invalid(format string, args ...any) (Result, bool) {
	return Result{Status: StatusInvalid, Message: fmt.Sprintf(format, args...)}, true
}

func checkLevels(levels []string) (Result, bool) {
	if len(levels) == 0 {
		return invalid("empty namespace")
	}
	for _, l := range levels {
		if l == "" {
			return invalid("namespace %q has an empty level", nsName(levels))
		}
	}
	if n := len(namespaceKey(levels)); n > maxIdentBytes {
		return invalid("namespace is %d bytes long, the limit is %d", n, maxIdentBytes)
	}
	return Result{}, false
}

func checkIdent(id Ident) (Result, bool) {
	if res, bad := checkLevels(id.Namespace); bad {
		return res, bad
	}
	if id.Name == "" {
		return invalid("empty table name")
	}
	if n := len(tableKey(id)); n > maxIdentBytes {
		return invalid("table identifier is %d bytes long, the limit is %d", n, maxIdentBytes)
	}
	return Result{}, false
}

func checkID(what, id string) (Result, bool) {
	if id == "" {
		return invalid("empty %s", what)
	}
	if len(id) > maxIDBytes {
		return invalid("%s is %d bytes long, the limit is %d", what, len(id), maxIDBytes)
	}
	return Result{}, false
}

func (c CreateNamespace) check() (Result, bool) { return checkLevels(c.Namespace) }
func (c DropNamespace) check() (Result, bool)   { return checkLevels(c.Namespace) }
func (c UpdateNamespace) check() (Result, bool) { return checkLevels(c.Namespace) }

func (c CommitTables) check() (Result, bool) {
	for _, ch := range c.Changes {
		if res, bad := checkIdent(ch.Ident); bad {
			return res, bad
		}
		if len(ch.Location) > maxLocationBytes || len(ch.LocationKey) > maxLocationBytes || len(ch.locKey()) > maxLocationBytes {
			return invalid("location of %s is over %d bytes", ch.Ident, maxLocationBytes)
		}
		if len(ch.Adopts) > maxFormerLocations {
			return invalid("%s adopts %d places, the limit is %d", ch.Ident, len(ch.Adopts), maxFormerLocations)
		}
		for _, a := range ch.Adopts {
			if len(a.Location) > maxLocationBytes || len(a.Key) > maxLocationBytes {
				return invalid("a place %s adopts is over %d bytes", ch.Ident, maxLocationBytes)
			}
		}
	}
	return Result{}, false
}

func (c DropTable) check() (Result, bool) {
	if res, bad := checkIdent(c.Ident); bad {
		return res, bad
	}
	if c.Job != nil && len(c.Job.ID) > maxIDBytes {
		return invalid("purge job id is %d bytes long, the limit is %d", len(c.Job.ID), maxIDBytes)
	}
	return Result{}, false
}

func (c RenameTable) check() (Result, bool) {
	if res, bad := checkIdent(c.From); bad {
		return res, bad
	}
	return checkIdent(c.To)
}

func (c PurgeHeartbeat) check() (Result, bool) { return checkID("node id", c.Node) }
func (c Keyed) check() (Result, bool)          { return checkID("Idempotency-Key", c.Key) }
func (c RecordOutcome) check() (Result, bool)  { return checkID("Idempotency-Key", c.Key) }
func (c ReleaseClaim) check() (Result, bool)   { return checkID("Idempotency-Key", c.Key) }
