package catalog

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The metadata cache is bounded by the bytes of its documents as well as
// by count, and does not keep a document over a quarter of its bytes: a
// few tables with huge metadata cannot hold the node's memory.
func TestMetadataCacheIsBoundedByBytes(t *testing.T) {
	c := newMetadataCache(100, 1000)
	doc := func(i, size int) *tableMetadata {
		return &tableMetadata{location: fmt.Sprintf("file:///wh/t/metadata/%05d.metadata.json", i), raw: make([]byte, size)}
	}
	for i := range 10 {
		c.add(doc(i, 200))
	}
	assert.Equal(t, 5, c.lru.Len(), "1000 bytes hold five 200-byte documents")
	assert.LessOrEqual(t, c.bytes.Load(), int64(1000))
	_, ok := c.get(doc(9, 200).location)
	assert.True(t, ok, "the newest stays")
	_, ok = c.get(doc(0, 200).location)
	assert.False(t, ok, "the oldest went first")

	c.add(doc(10, 251))
	_, ok = c.get(doc(10, 251).location)
	assert.False(t, ok, "over a quarter of the bytes: not kept")

	c.add(doc(9, 200)) // the same location again counts once
	assert.Equal(t, int64(1000), c.bytes.Load())
	c.remove(doc(9, 200).location)
	assert.Equal(t, int64(800), c.bytes.Load(), "a removal gives its bytes back")
}

// Concurrent adds of the same documents count each one once.
func TestMetadataCacheCountsConcurrentAddsOnce(t *testing.T) {
	c := newMetadataCache(10_000, 1<<30)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				c.add(&tableMetadata{location: fmt.Sprintf("file:///wh/t/metadata/%05d.metadata.json", i), raw: make([]byte, 100)})
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(2000*100), c.bytes.Load())
}

// Views' documents share the cache and its bounds with tables', under
// keys of their own: a view's file is never answered as a table's at the
// same location, nor the other way round.
func TestMetadataCacheKeepsViewsApart(t *testing.T) {
	c := newMetadataCache(100, 1000)
	loc := "file:///wh/v/metadata/00000.metadata.json"
	c.addView(&viewMetadata{location: loc, raw: make([]byte, 150)})
	_, ok := c.get(loc)
	assert.False(t, ok, "a view's document is not a table's")
	vm, ok := c.getView(loc)
	assert.True(t, ok)
	assert.Equal(t, loc, vm.location)
	c.add(&tableMetadata{location: loc, raw: make([]byte, 200)})
	assert.Equal(t, int64(350), c.bytes.Load(), "both count towards the bound")
	c.removeView(loc)
	_, ok = c.getView(loc)
	assert.False(t, ok)
	_, ok = c.get(loc)
	assert.True(t, ok, "removing the view's leaves the table's")
	assert.Equal(t, int64(200), c.bytes.Load())
	for i := range 10 {
		c.addView(&viewMetadata{location: fmt.Sprintf("file:///wh/v/metadata/%05d.metadata.json", i+1), raw: make([]byte, 200)})
	}
	assert.LessOrEqual(t, c.bytes.Load(), int64(1000), "views are bounded by the same bytes")
}
