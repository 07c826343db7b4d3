package storage

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 turned out to be missing (a kernel before
// 5.6) or refused (a seccomp filter): openDir then always walks.
var noOpenat2 atomic.Bool

// openDirNoLinks opens dir, a cleaned absolute path, in a few system calls
// when no component of it is a symbolic link, where openDir's walk takes
// four per component. openat2 with RESOLVE_NO_SYMLINKS resolves the whole
// path and fails if any component is a link; the *os.Root is then opened by
// path and accepted only if it is that same directory (device and inode)
// while the first descriptor still holds it, so that the pair cannot have
// been reused: whatever path OpenRoot took, it opened the directory reached
// without links. ok is false, with nothing left open, on any failure (a
// link, a missing or non-directory component, no openat2): openDir then
// walks the path, which tells those cases apart, creates what is missing
// and names the link.
func openDirNoLinks(dir string) (root *os.Root, ok bool) {
	if noOpenat2.Load() {
		return nil, false
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			noOpenat2.Store(true)
		}
		return nil, false
	}
	held := os.NewFile(uintptr(fd), dir)
	defer func() { _ = held.Close() }()
	want, err := held.Stat()
	if err != nil {
		return nil, false
	}
	root, err = os.OpenRoot(dir)
	if err != nil {
		return nil, false
	}
	got, err := root.Stat(".")
	if err != nil || !os.SameFile(want, got) {
		_ = root.Close()
		return nil, false
	}
	return root, true
}

// rmdirAt removes the empty directory name of parent, and only a
// directory: a file or link put at name meanwhile is left (ENOTDIR).
func rmdirAt(parent *os.Root, name string) error {
	d, err := parent.Open(".")
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return unix.Unlinkat(int(d.Fd()), name, unix.AT_REMOVEDIR)
}
