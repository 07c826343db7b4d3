package purge

import "testing"

func TestDecodedLocalURI(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"file:///wh/t/data/name=x%2Fy/f.parquet", "file:///wh/t/data/name=x/y/f.parquet"},
		{"file:///wh/t/data/ts=10%3A00/f.parquet", "file:///wh/t/data/ts=10:00/f.parquet"},
		{"file:///wh/t/data/n=%C3%A9/f.parquet", "file:///wh/t/data/n=é/f.parquet"},
		{"file:/wh/t/data/n=a%20b/f", "file:/wh/t/data/n=a b/f"},
		{"file://host/wh/t/n=a%2Fb", "file://host/wh/t/n=a/b"},
		// Nothing to decode, or not to be decoded.
		{"file:///wh/t/data/f.parquet", ""},
		{"s3://b/wh/t/data/name=x%2Fy/f.parquet", ""},
		{"file:///wh/t/data/bad%zz", ""},
		// A decoded path that could leave the directory named.
		{"file:///wh/t/data/%2E%2E/%2E%2E/other/f", ""},
		{"file:///wh/t/data/a%2F%2Fb", ""},
		{"file:///wh/t/data/a%2F.%2Fb", ""},
		{"file:///wh/t/data/a%00b", ""},
		{"file://host", ""},
	} {
		got, ok := decodedLocalURI(c.in)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("decodedLocalURI(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
}
