package storage

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openDirNoLinks opens dir, a cleaned absolute path, in a few system calls
// when no component of it is a symbolic link, where openDir's walk takes
// four per component. openat2 with RESOLVE_NO_SYMLINKS resolves the whole
// path and fails if any component is a link; the *os.Root is then opened by
// path and accepted only if it is that same directory (device and inode),
// so a link put in place in between is not followed. ok is false, with
// nothing left open, on any failure (a link, a missing or non-directory
// component, a kernel without openat2): openDir then walks the path, which
// tells those cases apart, creates what is missing and names the link.
func openDirNoLinks(dir string) (root *os.Root, ok bool) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return nil, false
	}
	var want unix.Stat_t
	err = unix.Fstat(fd, &want)
	_ = unix.Close(fd)
	if err != nil {
		return nil, false
	}
	root, err = os.OpenRoot(dir)
	if err != nil {
		return nil, false
	}
	fi, err := root.Stat(".")
	if err != nil {
		_ = root.Close()
		return nil, false
	}
	got, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat || uint64(got.Dev) != uint64(want.Dev) || uint64(got.Ino) != uint64(want.Ino) {
		_ = root.Close()
		return nil, false
	}
	return root, true
}
