package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestFailoverSummary(t *testing.T) {
	assert.Empty(t, failoverSummary(nil, 2))
	probes := []failoverProbe{
		{Node: "n2", NewLeader: true, Write: 900 * time.Millisecond, Read: time.Second},
		{Node: "n3", Write: 1100 * time.Millisecond, Read: 1200 * time.Millisecond},
		{Node: "n1", NewLeader: true, Write: 800 * time.Millisecond, Read: 850 * time.Millisecond},
		{Node: "n3", Write: 1300 * time.Millisecond}, // no read acknowledged
	}
	got := failoverSummary(probes, 2)
	assert.Contains(t, got, "(2 faults, 2 nodes each)")
	assert.Contains(t, got, "write median 1.1s, max 1.3s; read median 1s, max 1.2s, 1 none;")
	assert.Contains(t, got, "lost the election: write median 1.3s, max 1.3s; read median 1.2s, max 1.2s, 1 none")
	assert.Contains(t, failoverSummary(probes[:2], 2), "(1 fault, 2 nodes each)")
	assert.Equal(t, "via n1 (new leader): write 800ms, read 850ms (0 requests, 0 failed)", probes[2].String())
	assert.Equal(t, "via n3: write 1.3s, read none (0 requests, 0 failed)", probes[3].String())
}
