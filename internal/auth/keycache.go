package auth

import (
	"context"
	"sync"
	"time"
)

// minForcedRefresh spaces the re-reads of the ring caused by unknown kids,
// so that a flood of forged tokens with random kids costs at most ten ring
// reads a second (a KeySource may do a linearizable read).
const minForcedRefresh = 100 * time.Millisecond

// keyCache remembers the key ring for a short time, so that verifying a
// token costs no read of the replicated state.
type keyCache struct {
	src KeySource
	ttl time.Duration
	now func() time.Time

	mu         sync.Mutex
	keys       map[string]SigningKey // by ID
	fetched    time.Time             // zero: never
	lastForced time.Time             // last re-read for an unknown kid
}

// get returns the key with the given id. It reads the ring when the cached
// copy is older than ttl, and once more when the id is not in a cached copy
// (a rotation this node has not seen yet), unless another unknown kid
// caused such a re-read less than minForcedRefresh ago. found is false if
// the key is not in the ring so read. err is the KeySource's.
func (c *keyCache) get(ctx context.Context, id string) (key SigningKey, found bool, err error) {
	keys, fresh := c.cached()
	if !fresh {
		if keys, err = c.refresh(ctx); err != nil {
			return SigningKey{}, false, err
		}
	}
	if key, found = keys[id]; found || !fresh || !c.mayForce() {
		return key, found, nil
	}
	if keys, err = c.refresh(ctx); err != nil {
		return SigningKey{}, false, err
	}
	key, found = keys[id]
	return key, found, nil
}

// mayForce reports whether an unknown kid may re-read the ring now, and if
// so records that it does.
func (c *keyCache) mayForce() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.lastForced.IsZero() && now.Sub(c.lastForced) < minForcedRefresh {
		return false
	}
	c.lastForced = now
	return true
}

// cached returns the cached ring and whether it is younger than ttl.
func (c *keyCache) cached() (map[string]SigningKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := !c.fetched.IsZero() && c.now().Sub(c.fetched) < c.ttl
	return c.keys, fresh
}

// refresh reads the ring and caches it. Concurrent refreshes may both read;
// that is harmless, the ring is local state.
func (c *keyCache) refresh(ctx context.Context) (map[string]SigningKey, error) {
	list, err := c.src.SigningKeys(ctx)
	if err != nil {
		return nil, err
	}
	keys := make(map[string]SigningKey, len(list))
	for _, k := range list {
		keys[k.ID] = k
	}
	c.mu.Lock()
	c.keys, c.fetched = keys, c.now()
	c.mu.Unlock()
	return keys, nil
}
