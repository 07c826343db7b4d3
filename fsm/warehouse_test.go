package fsm

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWarehousesAreSeparateTrees(t *testing.T) {
	f := mustOpen(t, filepath.Join(t.TempDir(), "fsm.db"))
	sales := func(levels ...string) []string { return InWarehouse("sales", levels) }

	// A named warehouse's top-level namespace needs no stored parent; its
	// root alone is never a namespace.
	require.NoError(t, result(t, f.Apply(entry(t, 1, CreateNamespace{Namespace: sales("a")}))).Err())
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 2, CreateNamespace{Namespace: []string{WarehouseRoot("sales")}}))).Err(), ErrInvalidCommand)
	require.NoError(t, result(t, f.Apply(entry(t, 3, CreateNamespace{Namespace: []string{"a"}}))).Err())
	require.NoError(t, result(t, f.Apply(entry(t, 4, CreateNamespace{Namespace: []string{"b"}}))).Err())
	require.NoError(t, result(t, f.Apply(entry(t, 5, CreateNamespace{Namespace: sales("a", "x")}))).Err())
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 6, CreateNamespace{Namespace: sales("z", "x")}))).Err(), ErrNoSuchNamespace)

	// The same table name in both warehouses: two tables.
	def := Ident{Namespace: []string{"a"}, Name: "t"}
	named := Ident{Namespace: sales("a"), Name: "t"}
	require.NoError(t, result(t, f.Apply(entry(t, 7, create(def, "m-def")))).Err())
	c := create(named, "m-sales")
	c.Changes[0].Location = "file:///w2/t"
	require.NoError(t, result(t, f.Apply(entry(t, 8, c))).Err())
	assert.ErrorIs(t, result(t, f.Apply(entry(t, 9, DropNamespace{Namespace: sales("a")}))).Err(), ErrNamespaceNotEmpty)

	require.NoError(t, f.View(func(r *Reader) error {
		top, more := r.Namespaces(nil, "", 0)
		assert.False(t, more)
		var names [][]string
		for _, ns := range top {
			names = append(names, ns.Levels)
		}
		assert.Equal(t, [][]string{{"a"}, {"b"}}, names, "the default warehouse's top level shows none of a named warehouse's namespaces")
		inSales, _ := r.Namespaces([]string{WarehouseRoot("sales")}, "", 0)
		require.Len(t, inSales, 1)
		assert.Equal(t, sales("a"), inSales[0].Levels)

		tb, ok := r.Table(named)
		require.True(t, ok)
		assert.Equal(t, "m-sales", tb.MetadataLocation)
		tb, ok = r.Table(def)
		require.True(t, ok)
		assert.Equal(t, "m-def", tb.MetadataLocation)
		return nil
	}))

	wh, rest := SplitWarehouse(sales("a", "x"))
	assert.Equal(t, "sales", wh)
	assert.Equal(t, []string{"a", "x"}, rest)
	wh, rest = SplitWarehouse([]string{"a"})
	assert.Equal(t, "", wh)
	assert.Equal(t, []string{"a"}, rest)
	assert.Equal(t, "sales:a.t", named.String())
	assert.Equal(t, "a.t", def.String())
}
