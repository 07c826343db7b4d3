//go:build unix

package main

import (
	"os"
	"syscall"
)

// tempOpenFlags open a backup's temporary file without following a link
// (ELOOP) and without waiting on a pipe.
const tempOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// lockTemp takes an exclusive lock on f without waiting: an error means
// another process holds it.
func lockTemp(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
