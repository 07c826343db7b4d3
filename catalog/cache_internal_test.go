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
