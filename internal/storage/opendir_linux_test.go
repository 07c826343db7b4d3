package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The one-step open takes a directory reached without links and gives up,
// leaving the walk to refuse or create, on anything else.
func TestOpenDirNoLinks(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real", "metadata")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "real", "meta-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skip("openat2 is not available here; openDir walks every path")
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(fd)
	root, ok := openDirNoLinks(real + "/")
	if !ok {
		t.Fatal("a directory reached without links was not opened in one step")
	}
	fi, err := root.Stat(".")
	_ = root.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Stat(real)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fi, want) {
		t.Fatal("opened another directory")
	}

	for name, dir := range map[string]string{
		"linked ancestor":  filepath.Join(base, "link", "metadata") + "/",
		"linked last part": filepath.Join(base, "real", "meta-link") + "/",
		"missing":          filepath.Join(base, "real", "nope") + "/",
		"a file":           filepath.Join(base, "file") + "/",
	} {
		if root, ok := openDirNoLinks(dir); ok {
			_ = root.Close()
			t.Errorf("%s: opened %s", name, dir)
		}
	}
}
