//go:build !linux

package storage

import "os"

// openDirNoLinks has no one-step form here: openDir always walks.
func openDirNoLinks(string) (*os.Root, bool) { return nil, false }
