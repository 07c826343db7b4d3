// Package idemmodel generates the Idempotency-Key records of a busy catalog,
// the same ones on every run, for measuring what a record costs at rest: the
// state machine's unit benchmark (fsm) and the benchmark driver's item 8
// (bench) store them. It returns plain data and imports nothing of this
// module, so that fsm's own tests can use it.
package idemmodel

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"
)

// Outcome is the kind of outcome the records of a Generator hold.
type Outcome int

const (
	// Commit outcomes: 90% updateTable, 10% createTable, each with the
	// table's entry as it is after the commit.
	Commit Outcome = iota
	// UpdateProperties outcomes: a namespace's properties update setting
	// one property.
	UpdateProperties
)

// Warehouse is the warehouse location the tables of the model live under.
const Warehouse = "s3://lakehouse-prod/warehouse"

// Principal is the principal of every record.
const Principal = "svc-spark-etl"

// Lifetime is how long after AtMs a record expires (ExpiresMs): the
// default lifetime, 30 minutes, plus 5 minutes' grace.
const Lifetime = 35 * 60 * 1000 // milliseconds

// Record is one Idempotency-Key record: the key, the binding it was first
// used with (operation, route, principal, body digest), its times and its
// outcome. Exactly one of Table and Properties is set.
type Record struct {
	Key       string // a UUIDv7
	Operation string // updateTable, createTable or updateProperties
	// Route is the route's identifiers: the namespace, and for
	// updateTable a unit separator (0x1f) and the table's name.
	Route      string
	Principal  string
	BodyDigest string // 64 hex digits
	AtMs       int64
	ExpiresMs  int64
	// Table is a commit's outcome: the table's entry after it.
	Table *Table
	// Properties is an updateProperties outcome.
	Properties *Properties
}

// Table is a table's catalog entry as a commit leaves it.
type Table struct {
	Namespace        []string
	Name             string
	UUID             string
	Location         string
	LocationKey      string // Location with a trailing slash
	MetadataLocation string
	CreatedMs        int64
	UpdatedMs        int64
}

// Properties is an updateProperties outcome. Removed and Missing are empty,
// not nil.
type Properties struct {
	Updated, Removed, Missing []string
}

// Generator makes the records of a busy catalog: 3000 keyed requests a
// second, stamped by nodes at the start of each request and applied in the
// order the requests finish, so that a stamp is up to 20 ms off the order
// of application (nodes' clocks, requests that take longer). Keys are
// UUIDv7 made by 16 clients whose clocks differ by up to 10 ms. Commits go
// to 2000 tables in 20 namespaces of one S3 warehouse (Warehouse), each
// table at its default location with a metadata file version up to 5000;
// updateProperties outcomes set one of 100 properties on one of the 20
// namespaces. Two generators made with the same Outcome return the same
// records in the same order.
type Generator struct {
	rng     *rand.Rand
	outcome Outcome
	i       int64
	baseMs  int64
	skews   [16]int64
}

// New returns a generator of records with outcomes of kind o.
func New(o Outcome) *Generator {
	g := &Generator{rng: rand.New(rand.NewPCG(1, 2)), outcome: o, baseMs: 1_785_000_000_000}
	for c := range g.skews {
		g.skews[c] = g.rng.Int64N(21) - 10
	}
	return g
}

func (g *Generator) uuid4() string {
	var b uuid.UUID
	binary.BigEndian.PutUint64(b[:8], g.rng.Uint64())
	binary.BigEndian.PutUint64(b[8:], g.rng.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b.String()
}

func (g *Generator) uuid7(ms int64) string {
	var b uuid.UUID
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16|g.rng.Uint64()&0xffff)
	binary.BigEndian.PutUint64(b[8:], g.rng.Uint64())
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return b.String()
}

// Next returns the next record.
func (g *Generator) Next() Record {
	at := g.baseMs + g.i/3 + g.rng.Int64N(41) - 20
	g.i++
	n := g.rng.IntN(2000)
	ns := fmt.Sprintf("analytics_%02d", n%20)
	name := fmt.Sprintf("page_events_%04d", n)
	body := make([]byte, 32)
	for i := range body {
		body[i] = byte(g.rng.Uint32())
	}
	skew := g.skews[g.rng.IntN(len(g.skews))]
	r := Record{
		Key:        g.uuid7(at + skew),
		Route:      ns + "\x1f" + name,
		Principal:  Principal,
		BodyDigest: hex.EncodeToString(body),
		AtMs:       at,
		ExpiresMs:  at + Lifetime,
	}
	if g.outcome == UpdateProperties {
		r.Operation, r.Route = "updateProperties", ns
		r.Properties = &Properties{Updated: []string{fmt.Sprintf("k%d", g.rng.IntN(100))}, Removed: []string{}, Missing: []string{}}
		return r
	}
	loc := Warehouse + "/" + ns + "/" + name
	r.Operation = "updateTable"
	version := 1 + g.rng.IntN(5000)
	updated := at + g.rng.Int64N(5)
	created := at - g.rng.Int64N(90*24*3600*1000)
	if g.rng.IntN(10) == 0 {
		r.Operation, r.Route, version, created = "createTable", ns, 0, updated
	}
	id := g.uuid4()
	file := g.uuid4()
	r.Table = &Table{
		Namespace: []string{ns}, Name: name, UUID: id, Location: loc, LocationKey: loc + "/",
		MetadataLocation: fmt.Sprintf("%s/metadata/%05d-%s.metadata.json", loc, version, file),
		CreatedMs:        created, UpdatedMs: updated,
	}
	return r
}
