//go:build !linux

package storage

import (
	"os"
	"syscall"
)

// openDirNoLinks has no one-step form here: openDir always walks.
func openDirNoLinks(string) (*os.Root, bool) { return nil, false }

// rmdirAt removes the empty directory name of parent. Without unlinkat's
// directory-only flag in reach, it checks the entry first: a file put at
// name between the check and the removal would be removed.
func rmdirAt(parent *os.Root, name string) error {
	fi, err := parent.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return syscall.ENOTDIR
	}
	return parent.Remove(name)
}
