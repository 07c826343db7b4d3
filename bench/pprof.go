package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// ProfileShare is the share of a CPU profile's samples whose stack holds a
// frame whose function name contains Frame (cumulative: a sample counts once
// however many matching frames it has; shares of different frames overlap).
type ProfileShare struct {
	Label string
	Frame string
	Share float64
}

// commitProfileFrames are the parts of a commit item 1 reports from the
// in-process profile.
var commitProfileFrames = []ProfileShare{
	{Label: "catalog: write the metadata file (serialise + storage)", Frame: "catalog.(*Server).writeMetadata"},
	{Label: "storage: durable file write (temp file, fsync, rename, dir fsync)", Frame: "internal/storage.(*Mux).Write"},
	// A group-commit flush's fsyncs run on its own goroutines.
	{Label: "storage: durable file write (temp file, fsync, rename, dir fsync)", Frame: "internal/storage.(*groupSync)"},
	// Part of the write: the open(O_CREAT) of the new file, the kernel's
	// inode allocation.
	{Label: "storage: create the new file (open with O_CREAT: the kernel allocates its inode)", Frame: "internal/storage.createTemp"},
	{Label: "fsync / fdatasync (storage, Raft log, state machine)", Frame: "syscall.Fsync"},
	{Label: "fsync / fdatasync (storage, Raft log, state machine)", Frame: "syscall.Fdatasync"},
	{Label: "hashicorp/raft goroutines", Frame: "github.com/hashicorp/raft."},
	{Label: "bbolt (Raft log store and state machine)", Frame: "go.etcd.io/bbolt."},
	{Label: "encoding/json (anywhere)", Frame: "encoding/json."},
	{Label: "iceberg-go (metadata builder, parsing)", Frame: "github.com/apache/iceberg-go"},
	{Label: "the driver's load clients (not floe)", Frame: "floe/bench.commitLoad"},
	{Label: "the driver's load clients (not floe)", Frame: "net/http.(*persistConn)"},
	{Label: "garbage collector (background mark)", Frame: "runtime.gcBgMarkWorker"},
}

// profileShares reads a gzipped pprof CPU profile and returns, for each
// entry of frames, the share of CPU time whose stack includes a matching
// frame; entries with the same Label are merged (a sample matching either
// counts once). It also returns the profile's total CPU time.
func profileShares(path string, frames []ProfileShare) ([]ProfileShare, time.Duration, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, 0, err
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, 0, err
		}
	}
	p, err := parseProfile(raw)
	if err != nil {
		return nil, 0, err
	}
	var labels []string
	byLabel := map[string][]string{}
	for _, f := range frames {
		if _, ok := byLabel[f.Label]; !ok {
			labels = append(labels, f.Label)
		}
		byLabel[f.Label] = append(byLabel[f.Label], f.Frame)
	}
	vi := len(p.sampleTypes) - 1 // Go CPU profiles: [samples/count, cpu/nanoseconds]
	if vi < 0 {
		return nil, 0, errors.New("profile has no sample types")
	}
	var total int64
	hits := make([]int64, len(labels))
	for _, s := range p.samples {
		if vi >= len(s.values) {
			continue
		}
		v := s.values[vi]
		total += v
		for li, l := range labels {
			if p.stackMatches(s.locations, byLabel[l]) {
				hits[li] += v
			}
		}
	}
	out := make([]ProfileShare, len(labels))
	for i, l := range labels {
		out[i] = ProfileShare{Label: l, Frame: strings.Join(byLabel[l], " | ")}
		if total > 0 {
			out[i].Share = float64(hits[i]) / float64(total)
		}
	}
	return out, time.Duration(total), nil
}

// profile is the part of profile.proto (github.com/google/pprof) read here.
type profile struct {
	sampleTypes []struct{}
	samples     []pprofSample
	locFuncs    map[uint64][]uint64 // location id → function ids (inlined first)
	funcNames   map[uint64]int64    // function id → string table index
	strings     []string
}

type pprofSample struct {
	locations []uint64
	values    []int64
}

func (p *profile) stackMatches(locs []uint64, frames []string) bool {
	for _, l := range locs {
		for _, fid := range p.locFuncs[l] {
			si := p.funcNames[fid]
			if si < 0 || int(si) >= len(p.strings) {
				continue
			}
			name := p.strings[si]
			for _, f := range frames {
				if strings.Contains(name, f) {
					return true
				}
			}
		}
	}
	return false
}

// pbField is one protobuf field: a varint or a length-delimited payload.
type pbField struct {
	num   int
	wire  int
	value uint64
	bytes []byte
}

// pbFields splits a protobuf message into fields (varint, fixed64,
// length-delimited and fixed32 wire types).
func pbFields(b []byte) ([]pbField, error) {
	var out []pbField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("pprof: bad field key")
		}
		b = b[n:]
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return nil, errors.New("pprof: bad varint")
			}
			f.value, b = v, b[n:]
		case 1:
			if len(b) < 8 {
				return nil, errors.New("pprof: short fixed64")
			}
			f.value, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, errors.New("pprof: bad length")
			}
			f.bytes, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return nil, errors.New("pprof: short fixed32")
			}
			f.value, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return nil, fmt.Errorf("pprof: wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

// uints reads a repeated uint64 field: packed (length-delimited) or one
// varint.
func uints(f pbField) ([]uint64, error) {
	if f.wire == 0 {
		return []uint64{f.value}, nil
	}
	var out []uint64
	b := f.bytes
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("pprof: bad packed varint")
		}
		out, b = append(out, v), b[n:]
	}
	return out, nil
}

func parseProfile(b []byte) (*profile, error) {
	fields, err := pbFields(b)
	if err != nil {
		return nil, err
	}
	p := &profile{locFuncs: map[uint64][]uint64{}, funcNames: map[uint64]int64{}}
	for _, f := range fields {
		switch f.num {
		case 1: // sample_type
			p.sampleTypes = append(p.sampleTypes, struct{}{})
		case 2: // sample
			sf, err := pbFields(f.bytes)
			if err != nil {
				return nil, err
			}
			var s pprofSample
			for _, x := range sf {
				vs, err := uints(x)
				if err != nil {
					return nil, err
				}
				switch x.num {
				case 1:
					s.locations = append(s.locations, vs...)
				case 2:
					for _, v := range vs {
						s.values = append(s.values, int64(v))
					}
				}
			}
			p.samples = append(p.samples, s)
		case 4: // location
			lf, err := pbFields(f.bytes)
			if err != nil {
				return nil, err
			}
			var id uint64
			var funcs []uint64
			for _, x := range lf {
				switch x.num {
				case 1:
					id = x.value
				case 4: // line
					lnf, err := pbFields(x.bytes)
					if err != nil {
						return nil, err
					}
					for _, y := range lnf {
						if y.num == 1 {
							funcs = append(funcs, y.value)
						}
					}
				}
			}
			p.locFuncs[id] = funcs
		case 5: // function
			ff, err := pbFields(f.bytes)
			if err != nil {
				return nil, err
			}
			var id uint64
			name := int64(-1)
			for _, x := range ff {
				switch x.num {
				case 1:
					id = x.value
				case 2:
					name = int64(x.value)
				}
			}
			p.funcNames[id] = name
		case 6: // string_table
			p.strings = append(p.strings, string(f.bytes))
		}
	}
	return p, nil
}
