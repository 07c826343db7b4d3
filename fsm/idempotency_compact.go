package fsm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The stored form of an Idempotency-Key record (see DESIGN.md,
// "Idempotency records"). Records pile up at the rate of keyed mutations for
// the key lifetime plus grace, so they are kept small: the binding as a
// digest, the outcome in a compact binary encoding, a 17-byte key for a
// UUID key, and the record appended to bucketIdemRecords, with only a
// reference to it under its key. A record written before this format is
// JSON under its key and still read.

// recordFormat1 is the first byte of a compact record, the value of its
// entry in bucketIdemRecords.
const recordFormat1 byte = 0x01

// refFormat1 is the first byte of the value under a key whose record is
// compact: then a varint expires-ms and a uvarint seq, which make the
// record's recordSlotKey. A record written before the compact format is a
// JSON object there, whose first byte is '{'.
const refFormat1 byte = 0x02

func encodeRef(expiresMs int64, seq uint64) []byte {
	b := binary.AppendVarint([]byte{refFormat1}, expiresMs)
	return binary.AppendUvarint(b, seq)
}

func decodeRef(raw []byte) (expiresMs int64, seq uint64, err error) {
	r := recReader{b: raw}
	if r.byte() != refFormat1 {
		return 0, 0, fmt.Errorf("unknown record reference %x", raw)
	}
	expiresMs, seq = r.varint(), r.uvarint()
	if r.err != nil || len(r.b) != 0 {
		return 0, 0, fmt.Errorf("corrupt record reference %x", raw)
	}
	return expiresMs, seq, nil
}

// uuidKeyMark starts the bucket key of a record whose Idempotency-Key is a
// canonical UUID: the mark and the UUID's 16 bytes. Keys reach Apply
// JSON-decoded, so as valid UTF-8, in which the byte 0xFF never occurs: no
// other key, stored as itself, can be mistaken for one.
const uuidKeyMark byte = 0xFF

// knownOps are operation names stored as a one-byte code (index + 1); any
// other name is stored as it is (code 0). Codes are stored: append only,
// never reorder or remove.
var knownOps = []string{
	// The catalog (catalog/idempotency.go keyedOps).
	"createNamespace", "dropNamespace", "updateProperties",
	"createTable", "registerTable", "updateTable", "dropTable", "unregisterTable", "renameTable", "commitTransaction",
	"createView", "registerView", "replaceView", "dropView", "renameView",
	// The operator API (internal/admin).
	"purge-job-retried", "purge-job-released",
	"createAuthClient", "deleteAuthClient", "createAuthToken", "deleteAuthToken", "rotateSigningKey",
	"grant", "revoke", "setPrincipalRoles",
	"addVoter", "addNonvoter", "removeMember", "transferLeadership",
}

var knownOpCodes = func() map[string]uint64 {
	m := make(map[string]uint64, len(knownOps))
	for i, op := range knownOps {
		m[op] = uint64(i + 1)
	}
	return m
}()

// BindingDigest is what a record keeps of the binding its key was first
// used with. Sum (128 bits of SHA-256 over the operation, route, principal
// and body digest) decides whether a request binds the key again; the
// one-byte tags of the route, principal and body only shape the message
// that refuses a reused key (a differing tag always means a differing
// part; an equal tag may hide one, 1 time in 256).
type BindingDigest struct {
	Sum                    [16]byte
	Route, Principal, Body byte
}

// Digest returns the binding's digest. Its definition is part of the stored
// format: never change it.
func (b Binding) Digest() BindingDigest {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, s := range []string{b.Operation, b.Route, b.Principal, b.BodyDigest} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		io.WriteString(h, s)
	}
	var d BindingDigest
	copy(d.Sum[:], h.Sum(nil))
	d.Route, d.Principal, d.Body = digestTag(b.Route), digestTag(b.Principal), digestTag(b.BodyDigest)
	return d
}

func digestTag(s string) byte {
	h := fnv.New32a()
	io.WriteString(h, s)
	return byte(h.Sum32())
}

// recordKey is the bucket key of key's record in the current format.
func recordKey(key string) []byte {
	if id, ok := parseUUID(key); ok {
		return append([]byte{uuidKeyMark}, id[:]...)
	}
	return []byte(key)
}

// legacyRecordKey is where a record written before the compact format may
// be stored under a key that now has another bucket key, or nil.
func legacyRecordKey(key string) []byte {
	if _, ok := parseUUID(key); ok {
		return []byte(key)
	}
	return nil
}

// keyOf is the Idempotency-Key stored under bucket key k.
func keyOf(k []byte) string {
	if len(k) == 17 && k[0] == uuidKeyMark {
		return formatUUID([16]byte(k[1:]))
	}
	return string(k)
}

// parseUUID parses a UUID in canonical form: 36 characters, lower-case hex
// digits, hyphens after the 8th, 12th, 16th and 20th digit (what
// idempotency.ParseKey returns). Any other spelling is not canonical and
// is stored as it is.
func parseUUID(s string) (id [16]byte, ok bool) {
	if len(s) != 36 {
		return id, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return id, false
			}
			i++
			continue
		}
		hi, lo := lowerHex(s[i]), lowerHex(s[i+1])
		if hi < 0 || lo < 0 {
			return id, false
		}
		id[j] = byte(hi<<4 | lo)
		j++
		i += 2
	}
	return id, true
}

func lowerHex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

func formatUUID(id [16]byte) string {
	const digits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, x := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = digits[x>>4], digits[x&0xf]
		j += 2
	}
	return string(b[:])
}

// Metadata locations are most of a stored outcome. The catalog writes them
// as <table location>/metadata/<version, 5 digits or more>-<uuid>.metadata.json,
// and a default table location is <warehouse>/<namespace levels>/<name>:
// such a location is stored as the part before the identifier (or before
// /metadata/), the version and the file's 16 UUID bytes. Any location that
// does not read back exactly is stored as it is.
const (
	locLiteral byte = iota
	// locUnderIdent: <root>/<level>/.../<name>/metadata/<version>-<uuid>.metadata.json
	locUnderIdent
	// locUnderPrefix: <prefix>/metadata/<version>-<uuid>.metadata.json
	locUnderPrefix
	// locUnderRootID: as locUnderIdent, with the root's id in the
	// record's rootTable stored in place of the root (decoding makes it
	// locUnderIdent again).
	locUnderRootID
)

// rootTable interns the roots of locUnderIdent metadata locations. id
// returns root's id, interning it when it can; ok false means the root is
// stored as it is. root returns the root of an id, ok false when there is
// none. A nil rootTable interns nothing.
type rootTable interface {
	id(root string) (id uint64, ok bool)
	root(id uint64) (root string, ok bool)
}

type packedLoc struct {
	form    byte
	prefix  string // the literal location for locLiteral
	version uint64
	file    [16]byte
}

const metadataSuffix = ".metadata.json"

func identPath(ns []string, name string) string {
	return "/" + strings.Join(ns, "/") + "/" + name
}

// dir is the directory the metadata directory is in (the table's location
// as the catalog writes it), when the location is not stored literally.
func (p packedLoc) dir(ns []string, name string) (string, bool) {
	switch p.form {
	case locUnderIdent:
		return p.prefix + identPath(ns, name), true
	case locUnderPrefix:
		return p.prefix, true
	}
	return "", false
}

func (p packedLoc) expand(ns []string, name string) string {
	switch p.form {
	case locUnderIdent:
		return fmt.Sprintf("%s%s/metadata/%05d-%s%s", p.prefix, identPath(ns, name), p.version, formatUUID(p.file), metadataSuffix)
	case locUnderPrefix:
		return fmt.Sprintf("%s/metadata/%05d-%s%s", p.prefix, p.version, formatUUID(p.file), metadataSuffix)
	}
	return p.prefix
}

func packLoc(loc string, ns []string, name string) packedLoc {
	lit := packedLoc{form: locLiteral, prefix: loc}
	rest, ok := strings.CutSuffix(loc, metadataSuffix)
	if !ok || len(rest) < 36 {
		return lit
	}
	file, ok := parseUUID(rest[len(rest)-36:])
	if !ok {
		return lit
	}
	rest, ok = strings.CutSuffix(rest[:len(rest)-36], "-")
	if !ok {
		return lit
	}
	i := strings.LastIndex(rest, "/metadata/")
	if i < 0 {
		return lit
	}
	version, err := strconv.ParseUint(rest[i+len("/metadata/"):], 10, 64)
	if err != nil {
		return lit
	}
	p := packedLoc{form: locUnderPrefix, prefix: rest[:i], version: version, file: file}
	if root, ok := strings.CutSuffix(p.prefix, identPath(ns, name)); ok && len(ns) > 0 {
		q := p
		q.form, q.prefix = locUnderIdent, root
		if q.expand(ns, name) == loc {
			return q
		}
	}
	if p.expand(ns, name) == loc {
		return p
	}
	return lit
}

// encodeRecord writes rec, whose key in bucketIdempotency is k, in the
// compact format:
//
//	0x01
//	uvarint   expires-ms − its slot's start (the slot is in the entry's key)
//	string    k
//	lifetime  expires-ms − created-ms: a uvarint, zigzag(d/1000)<<1 | 1
//	          when d is whole seconds, else 0 and a varint d
//	uvarint   operation code (0: the name follows as a string)
//	16 bytes  binding digest Sum, then its route, principal, body tags
//	outcome   (result)
//
// A string is a uvarint length and the bytes; a list of strings is a
// uvarint count + 1 (0: nil) and the strings; a varint is zigzag encoded.
func encodeRecord(k []byte, rec IdempotencyRecord, roots rootTable) []byte {
	w := recWriter{roots: roots}
	w.b = make([]byte, 0, 160)
	w.byte(recordFormat1)
	w.uvarint(uint64(rec.ExpiresMs) & (1<<slotBits - 1))
	w.uvarint(uint64(len(k)))
	w.b = append(w.b, k...)
	if d := rec.ExpiresMs - rec.CreatedMs; d%1000 == 0 {
		w.uvarint(zigzag(d/1000)<<1 | 1)
	} else {
		w.uvarint(0)
		w.varint(d)
	}
	if code, ok := knownOpCodes[rec.Operation]; ok {
		w.uvarint(code)
	} else {
		w.uvarint(0)
		w.string(rec.Operation)
	}
	w.b = append(w.b, rec.Digest.Sum[:]...)
	w.b = append(w.b, rec.Digest.Route, rec.Digest.Principal, rec.Digest.Body)
	w.route, w.noUUID = rec.route, uuidFreeOps[rec.Operation]
	w.result(rec.outcome, rec.CreatedMs)
	return w.b
}

// Outcome flags: which parts of a Result follow its status.
const (
	outMessage byte = 1 << iota
	outProperties
	outCount
	outTables
	outViews
	outReplayed
	outRecorded
	// outNoTimes: the entries carry no times (every record written since;
	// no answer is built from them).
	outNoTimes
)

// uuidFreeOps are the operations whose replay is built from an entry's
// identifier and metadata location alone (catalog/idempotency.go replay):
// their entries leave the UUID out (entNoUUID). Any other operation's keep
// it (a replayed synchronous purge finds its job by the dropped table's
// UUID).
var uuidFreeOps = map[string]bool{
	"createTable": true, "registerTable": true, "updateTable": true, "unregisterTable": true, "renameTable": true, "commitTransaction": true,
	"createView": true, "registerView": true, "replaceView": true, "renameView": true,
}

// result writes res whole, so that a replay returns exactly the Result
// first stored. atMs (the record's created-ms) is the base of the entries'
// times.
//
//	byte     status
//	byte     flags (outMessage...)
//	string   message                          if outMessage
//	3 lists  updated, removed, missing        if outProperties
//	varint   count                            if outCount
//	uvarint n, n entries                      if outTables, then if outViews
//
// An entry (a Table, or a View, which has the same fields):
//
//	byte     flags: bit 0 the UUID as 16 bytes (else a string); bits 1–2
//	         the metadata location's form (locLiteral...); bit 3 the
//	         location is the metadata location's directory (else a string);
//	         bits 4–5 the location key: a string, empty, or the location
//	         and "/"
//	list     namespace levels
//	string   name
//	16 bytes or string: UUID
//	string   metadata location (locLiteral), or a string, a uvarint version
//	         and the file's 16 UUID bytes
//	string   location                         unless bit 3
//	string   location key                     if bits 4–5 are 0
//	varint   atMs − updated-ms, then updated-ms − created-ms
func (w *recWriter) result(res Result, atMs int64) {
	w.byte(byte(res.Status))
	var flags byte
	if res.Message != "" {
		flags |= outMessage
	}
	if res.Properties != nil {
		flags |= outProperties
	}
	if res.Count != 0 {
		flags |= outCount
	}
	if len(res.Tables) > 0 {
		flags |= outTables
	}
	if len(res.Views) > 0 {
		flags |= outViews
	}
	if res.Replayed {
		flags |= outReplayed
	}
	if res.Recorded {
		flags |= outRecorded
	}
	flags |= outNoTimes
	w.byte(flags)
	if flags&outMessage != 0 {
		w.string(res.Message)
	}
	if p := res.Properties; p != nil {
		w.strings(p.Updated)
		w.strings(p.Removed)
		w.strings(p.Missing)
	}
	if flags&outCount != 0 {
		w.varint(int64(res.Count))
	}
	if flags&outTables != 0 {
		w.uvarint(uint64(len(res.Tables)))
		for _, t := range res.Tables {
			w.entry(t, atMs)
		}
	}
	if flags&outViews != 0 {
		w.uvarint(uint64(len(res.Views)))
		for _, v := range res.Views {
			w.entry(v.asTable(), atMs)
		}
	}
}

// Entry flags.
const (
	entUUID      byte = 1      // the UUID as 16 bytes
	entMetaShift      = 1      // bits 1–2: the metadata location's form
	entLocIsDir  byte = 1 << 3 // the location is the metadata location's directory
	entKeyShift       = 4      // bits 4–5: the location key's form
	keyLiteral   byte = 0
	keyEmpty     byte = 1
	keyLocSlash  byte = 2
	entRouted    byte = 1 << 6 // the identifier is the binding's route: not stored
	entNoUUID    byte = 1 << 7 // the UUID is not stored (uuidFreeOps)
)

// routeSep separates the parts of a binding's route (catalog/idempotency.go:
// a named warehouse's root, then the path variables namespace and table or
// view as they arrive, URL-encoded). A route names an identifier only when
// its parts are the stored levels and name: a single-level namespace whose
// name needs no escaping.
const routeSep = "\x1f"

// splitRoute reads a route as the identifier it names: every part but the
// last the namespace levels, the last the name. ok is false for a route of
// fewer than two parts.
func splitRoute(route string) (ns []string, name string, ok bool) {
	parts := strings.Split(route, routeSep)
	if len(parts) < 2 {
		return nil, "", false
	}
	return parts[:len(parts)-1], parts[len(parts)-1], true
}

// isRoute reports whether route names exactly the identifier ns.name.
func isRoute(route string, ns []string, name string) bool {
	rns, rname, ok := splitRoute(route)
	return ok && rname == name && slices.Equal(rns, ns)
}

// routedEntry is a table or view entry of a read record stored without its
// identifier (entRouted): what it takes to complete it from the route.
type routedEntry struct {
	view     bool
	i        int // in the outcome's Tables or Views
	meta     packedLoc
	locIsDir bool
	key      byte
}

// complete gives t the identifier ns.name and the locations made from it.
func (e routedEntry) complete(t *Table, ns []string, name string) {
	t.Namespace, t.Name = ns, name
	t.MetadataLocation = e.meta.expand(ns, name)
	if e.locIsDir {
		t.Location, _ = e.meta.dir(ns, name)
	}
	if e.key == keyLocSlash {
		t.LocationKey = t.Location + "/"
	}
}

func (w *recWriter) entry(t Table, atMs int64) {
	var flags byte
	raw, rawID := parseUUID(t.UUID)
	if rawID {
		flags |= entUUID
	}
	meta := packLoc(t.MetadataLocation, t.Namespace, t.Name)
	form, rootID := meta.form, uint64(0)
	if form == locUnderIdent && w.roots != nil {
		if id, ok := w.roots.id(meta.prefix); ok {
			form, rootID = locUnderRootID, id
		}
	}
	flags |= form << entMetaShift
	if dir, ok := meta.dir(t.Namespace, t.Name); ok && dir == t.Location {
		flags |= entLocIsDir
	}
	key := keyLiteral
	switch {
	case t.LocationKey == "":
		key = keyEmpty
	case t.LocationKey == t.Location+"/":
		key = keyLocSlash
	}
	flags |= key << entKeyShift
	if w.route != "" && isRoute(w.route, t.Namespace, t.Name) {
		flags |= entRouted
	}
	if w.noUUID {
		flags &^= entUUID
		flags |= entNoUUID
	}
	w.byte(flags)
	if flags&entRouted == 0 {
		w.strings(t.Namespace)
		w.string(t.Name)
	}
	switch {
	case w.noUUID:
	case rawID:
		w.b = append(w.b, raw[:]...)
	default:
		w.string(t.UUID)
	}
	if form == locUnderRootID {
		w.uvarint(rootID)
	} else {
		w.string(meta.prefix)
	}
	if meta.form != locLiteral {
		w.uvarint(meta.version)
		w.b = append(w.b, meta.file[:]...)
	}
	if flags&entLocIsDir == 0 {
		w.string(t.Location)
	}
	if key == keyLiteral {
		w.string(t.LocationKey)
	}
}

// recWriter writes a compact record; route is the binding's route, which
// entries named by it leave out.
type recWriter struct {
	b      []byte
	route  string
	noUUID bool      // entries leave the UUID out
	roots  rootTable // interns roots; nil: none
}

func (w *recWriter) byte(c byte)      { w.b = append(w.b, c) }
func (w *recWriter) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *recWriter) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *recWriter) string(s string)  { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }
func (w *recWriter) strings(l []string) {
	if l == nil {
		w.uvarint(0)
		return
	}
	w.uvarint(uint64(len(l)) + 1)
	for _, s := range l {
		w.string(s)
	}
}

func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

var errShortRecord = errors.New("truncated record")

// decodeRecordHead reads the expiry of the compact record stored under sk
// in bucketIdemRecords and its key in bucketIdempotency.
func decodeRecordHead(sk, raw []byte) (expiresMs int64, k []byte, err error) {
	r := recReader{b: raw}
	expiresMs, k = r.head(sk)
	return expiresMs, k, r.err
}

func (r *recReader) head(sk []byte) (expiresMs int64, k []byte) {
	if v := r.byte(); v != recordFormat1 && r.err == nil {
		r.err = fmt.Errorf("unknown record format %d", v)
	}
	low := r.uvarint()
	if low >= 1<<slotBits && r.err == nil {
		r.err = fmt.Errorf("expiry %d past its slot", low)
	}
	k = r.take(r.count())
	if len(sk) != 16 && r.err == nil {
		r.err = fmt.Errorf("record key %x", sk)
	}
	if r.err != nil {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(sk[:8])<<slotBits | low), k
}

// decodeRecord reads the compact record stored under sk in
// bucketIdemRecords, and its key in bucketIdempotency.
func decodeRecord(sk, raw []byte, roots rootTable) (IdempotencyRecord, []byte, error) {
	r := recReader{b: raw, roots: roots}
	expiresMs, k := r.head(sk)
	rec := IdempotencyRecord{Key: keyOf(k), ExpiresMs: expiresMs}
	if u := r.uvarint(); u&1 == 1 {
		rec.CreatedMs = expiresMs - unzigzag(u>>1)*1000
	} else if u == 0 {
		rec.CreatedMs = expiresMs - r.varint()
	} else if r.err == nil {
		r.err = fmt.Errorf("unknown lifetime form %d", u)
	}
	if code := r.uvarint(); code == 0 {
		rec.Operation = r.string()
	} else if code <= uint64(len(knownOps)) {
		rec.Operation = knownOps[code-1]
	} else if r.err == nil {
		r.err = fmt.Errorf("unknown operation code %d", code)
	}
	copy(rec.Digest.Sum[:], r.take(16))
	if tags := r.take(3); tags != nil {
		rec.Digest.Route, rec.Digest.Principal, rec.Digest.Body = tags[0], tags[1], tags[2]
	}
	r.uuidFree = uuidFreeOps[rec.Operation]
	rec.outcome = r.result(rec.CreatedMs)
	rec.routed = r.routed
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the record", len(r.b))
	}
	if r.err != nil {
		return IdempotencyRecord{}, nil, r.err
	}
	return rec, k, nil
}

func (r *recReader) result(atMs int64) Result {
	var res Result
	res.Status = Status(r.byte())
	flags := r.byte()
	// Every bit of both flag bytes has a meaning now: a later form needs
	// a new record format byte (recordFormat1).
	res.Replayed, res.Recorded = flags&outReplayed != 0, flags&outRecorded != 0
	r.noTimes = flags&outNoTimes != 0
	if flags&outMessage != 0 {
		if res.Message = r.string(); res.Message == "" && r.err == nil {
			r.err = errors.New("empty message")
		}
	}
	if flags&outProperties != 0 {
		res.Properties = &PropertiesOutcome{Updated: r.strings(), Removed: r.strings(), Missing: r.strings()}
	}
	if flags&outCount != 0 {
		if res.Count = int(r.varint()); res.Count == 0 && r.err == nil {
			r.err = errors.New("zero count")
		}
	}
	if flags&outTables != 0 {
		n := r.nonZeroCount()
		res.Tables = make([]Table, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			res.Tables = append(res.Tables, r.entry(atMs, false, i))
		}
	}
	if flags&outViews != 0 {
		n := r.nonZeroCount()
		res.Views = make([]View, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			res.Views = append(res.Views, r.entry(atMs, true, i).asView())
		}
	}
	return res
}

// entry reads the i-th table (or view) entry. One stored without its
// identifier is read without it, and noted in r.routed.
func (r *recReader) entry(atMs int64, view bool, i int) Table {
	var t Table
	flags := r.byte()
	meta := packedLoc{form: flags >> entMetaShift & 3}
	key := flags >> entKeyShift & 3
	if r.err == nil && key > keyLocSlash {
		r.err = fmt.Errorf("unknown entry flags %#x", flags)
	}
	routed := flags&entRouted != 0
	// Entries written before the no-times flag know none of the later
	// forms; since, the UUID is left out exactly for uuidFreeOps.
	later := flags&(entRouted|entNoUUID) != 0 || meta.form == locUnderRootID
	if r.err == nil && (!r.noTimes && later || r.noTimes && (flags&entNoUUID != 0) != r.uuidFree) {
		r.err = fmt.Errorf("entry flags %#x not written for this record", flags)
	}
	if !routed {
		t.Namespace = r.strings()
		t.Name = r.string()
	}
	switch {
	case flags&entNoUUID != 0:
		if flags&entUUID != 0 && r.err == nil {
			r.err = fmt.Errorf("entry flags %#x: a UUID both stored and not", flags)
		}
	case flags&entUUID != 0:
		if b := r.take(16); b != nil {
			t.UUID = formatUUID([16]byte(b))
		}
	default:
		t.UUID = r.string()
	}
	if meta.form == locUnderRootID {
		id := r.uvarint()
		var ok bool
		if r.roots != nil {
			meta.prefix, ok = r.roots.root(id)
		}
		if !ok && r.err == nil {
			r.err = fmt.Errorf("unknown root id %d", id)
		}
		meta.form = locUnderIdent
	} else {
		meta.prefix = r.string()
	}
	if meta.form != locLiteral {
		meta.version = r.uvarint()
		if b := r.take(16); b != nil {
			meta.file = [16]byte(b)
		}
	}
	e := routedEntry{view: view, i: i, meta: meta, locIsDir: flags&entLocIsDir != 0, key: key}
	if !e.locIsDir {
		t.Location = r.string()
	}
	if key == keyLiteral {
		t.LocationKey = r.string()
	}
	if !r.noTimes {
		t.UpdatedMs = atMs - r.varint()
		t.CreatedMs = t.UpdatedMs - r.varint()
	}
	if routed {
		r.routed = append(r.routed, e)
	} else {
		e.complete(&t, t.Namespace, t.Name)
	}
	return t
}

// recReader reads a compact record; the first error sticks and makes every
// later read return zero.
type recReader struct {
	b        []byte
	err      error
	routed   []routedEntry // entries read without their identifier
	roots    rootTable     // the ids of locUnderRootID
	noTimes  bool          // the outcome's entries carry no times
	uuidFree bool          // the record's operation is one of uuidFreeOps
}

func (r *recReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errShortRecord
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *recReader) byte() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *recReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShortRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShortRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a length that must fit in what is left of the record.
func (r *recReader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		if r.err == nil {
			r.err = errShortRecord
		}
		return 0
	}
	return int(n)
}

// nonZeroCount reads the length of a list stored only when it has entries.
func (r *recReader) nonZeroCount() int {
	n := r.count()
	if n == 0 && r.err == nil {
		r.err = errors.New("empty list")
	}
	return n
}

func (r *recReader) string() string {
	n := r.count()
	return string(r.take(n))
}

func (r *recReader) strings() []string {
	n := r.uvarint()
	if n == 0 {
		return nil
	}
	if n-1 > uint64(len(r.b)) { // each string takes a byte at least
		if r.err == nil {
			r.err = errShortRecord
		}
		return nil
	}
	out := make([]string, 0, n-1)
	for i := uint64(0); i < n-1 && r.err == nil; i++ {
		out = append(out, r.string())
	}
	return out
}

// legacyRecord is a record as stored before the compact format.
type legacyRecord struct {
	Key       string  `json:"key"`
	Binding   Binding `json:"binding"`
	Result    Result  `json:"result"`
	CreatedMs int64   `json:"created-ms"`
	ExpiresMs int64   `json:"expires-ms"`
}

func decodeLegacyRecord(raw []byte) (IdempotencyRecord, error) {
	var old legacyRecord
	if err := json.Unmarshal(raw, &old); err != nil {
		return IdempotencyRecord{}, err
	}
	return IdempotencyRecord{
		Key: old.Key, Operation: old.Binding.Operation, Digest: old.Binding.Digest(),
		outcome: old.Result, CreatedMs: old.CreatedMs, ExpiresMs: old.ExpiresMs,
	}, nil
}
