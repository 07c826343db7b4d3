package catalog

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
)

// checkSchemaShape refuses, as a 400, a schema that Java's Schema and
// SchemaParser refuse to build, so that one client's write cannot make a
// table or view unloadable for the others: two fields with one full name,
// a required field of type unknown, and an initial-default or
// write-default that is not a value of its field's type as Java's
// SingleValueParser reads it, or not null for a struct, list or map field
// (iceberg-go stores any JSON value there). The
// table builder checks the first two for tables; views have no builder
// that does.
func checkSchemaShape(s *iceberg.Schema) error {
	if _, err := iceberg.IndexByName(s); err != nil {
		return badRequest("invalid schema %d: %v", s.ID, err)
	}
	fields, err := iceberg.IndexByID(s)
	if err != nil {
		return badRequest("invalid schema %d: %v", s.ID, err)
	}
	for _, id := range slices.Sorted(maps.Keys(fields)) {
		f := fields[id]
		if _, unknown := f.Type.(iceberg.UnknownType); unknown && f.Required {
			return badRequest("invalid schema %d: field %q (id %d) is of type unknown and must be optional", s.ID, f.Name, f.ID)
		}
		for _, d := range []struct {
			name  string
			value any
		}{{"initial-default", f.InitialDefault}, {"write-default", f.WriteDefault}} {
			if d.value == nil {
				continue
			}
			if err := checkDefault(f.Type, d.value); err != nil {
				return badRequest("invalid schema %d: field %q (id %d): %s %s", s.ID, f.Name, f.ID, d.name, err)
			}
		}
	}
	return nil
}

var (
	decimalDefault = regexp.MustCompile(`^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$`)
	localTime      = []string{"15:04", "15:04:05", "15:04:05.999999999"}
	localDateTime  = prefixed("2006-01-02T", localTime)
)

// checkDefault reports why v, a default decoded from JSON, is not a value
// of type t in the single-value JSON form of the Iceberg spec (Appendix D),
// as Java's SingleValueParser.fromJson reads it; nil when it is, or when v
// is not a value JSON decoding gives (numbers are float64 or
// json.Number).
func checkDefault(t iceberg.Type, v any) error {
	bad := func(why string) error {
		b, _ := json.Marshal(v)
		if len(b) > 64 {
			b = append(b[:61], "..."...)
		}
		return fmt.Errorf("%s is not a %s value: %s", b, t, why)
	}
	switch v.(type) {
	case string, float64, json.Number, bool, map[string]any, []any:
	default:
		// Not decoded from JSON: a typed value iceberg-go built, which
		// it writes in the single-value form itself.
		return nil
	}
	num, isNum := number(v)
	str, isStr := v.(string)
	switch t := t.(type) {
	case iceberg.BooleanType:
		if _, ok := v.(bool); !ok {
			return bad("want true or false")
		}
	case iceberg.Int32Type:
		if !isNum || num != math.Trunc(num) || num < math.MinInt32 || num > math.MaxInt32 {
			return bad("want a 32-bit integer")
		}
	case iceberg.Int64Type:
		if !isNum || num != math.Trunc(num) || num < math.MinInt64 || num >= math.MaxInt64 {
			return bad("want a 64-bit integer")
		}
	case iceberg.Float32Type, iceberg.Float64Type:
		if !isNum {
			return bad("want a number")
		}
	case iceberg.StringType:
		if !isStr {
			return bad("want a string")
		}
	case iceberg.UUIDType:
		if _, err := uuid.Parse(str); !isStr || len(str) != 36 || err != nil {
			return bad("want a UUID string")
		}
	case iceberg.DecimalType:
		if !isStr || !decimalDefault.MatchString(str) {
			return bad("want a decimal number in a string")
		}
		if decimalScale(str) != t.Scale() {
			return bad(fmt.Sprintf("want scale %d", t.Scale()))
		}
	case iceberg.DateType:
		if _, err := time.Parse("2006-01-02", str); !isStr || err != nil {
			return bad("want an ISO-8601 date (2006-01-02)")
		}
	case iceberg.TimeType:
		if !isStr || !parsesAs(str, localTime...) {
			return bad("want an ISO-8601 local time (15:04:05.999999)")
		}
	case iceberg.TimestampType, iceberg.TimestampNsType:
		if !isStr || !parsesAs(str, localDateTime...) {
			return bad("want an ISO-8601 local date-time (2006-01-02T15:04:05.999999)")
		}
	case iceberg.TimestampTzType, iceberg.TimestampTzNsType:
		if !isStr || !utcTimestamp(str) {
			return bad("want an ISO-8601 date-time at offset +00:00 (2006-01-02T15:04:05.999999+00:00)")
		}
	case iceberg.FixedType:
		if _, err := hex.DecodeString(str); !isStr || err != nil || len(str) != 2*t.Len() {
			return bad(fmt.Sprintf("want %d bytes in hexadecimal", t.Len()))
		}
	case iceberg.BinaryType:
		if _, err := hex.DecodeString(str); !isStr || err != nil {
			return bad("want bytes in hexadecimal")
		}
	case *iceberg.StructType, *iceberg.ListType, *iceberg.MapType:
		// Java (1.10) keeps a field's defaults as literals, which only
		// primitive types have: a non-null default of a nested type,
		// even an empty struct, fails its schema parser. A struct's
		// values are its sub-fields' defaults (table spec v3).
		return bad("a struct, list or map field has no default but null (set defaults on its sub-fields)")
	default:
		// unknown, variant, geometry, geography: Java reads no default
		// of these types.
		return bad("a field of this type has no default but null")
	}
	return nil
}

// number returns v as a float64 when it is a JSON number.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// decimalScale is the scale of a decimal literal as Java's BigDecimal
// counts it: digits after the point, less the exponent.
func decimalScale(s string) int {
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	scale := 0
	if _, frac, ok := strings.Cut(mant, "."); ok {
		scale = len(frac)
	}
	if exp != "" {
		e, err := strconv.Atoi(exp)
		if err != nil {
			return math.MinInt32
		}
		scale -= e
	}
	return scale
}

func parsesAs(s string, layouts ...string) bool {
	for _, l := range layouts {
		if _, err := time.Parse(l, s); err == nil {
			return true
		}
	}
	return false
}

func prefixed(prefix string, layouts []string) []string {
	out := make([]string, len(layouts))
	for i, l := range layouts {
		out[i] = prefix + l
	}
	return out
}

// utcTimestamp reports whether s is an ISO-8601 date-time with a zone
// offset of zero ("Z", "+00:00", "-00:00"), as Java's isUTCTimestamptz
// requires.
func utcTimestamp(s string) bool {
	for _, l := range localDateTime {
		for _, zone := range []string{"Z07:00", "Z0700"} {
			if t, err := time.Parse(l+zone, s); err == nil {
				_, off := t.Zone()
				return off == 0
			}
		}
	}
	return false
}
