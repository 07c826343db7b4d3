package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrSymlink is wrapped by errors for local paths that cross a symbolic link:
// a directory component of the path, or the object itself, is a link. The
// local store never follows links (see openDir), so that a link planted
// inside a table's directory cannot make a read, write or purge reach a file
// outside the table's location.
var ErrSymlink = errors.New("path crosses a symbolic link")

// ErrIsDirectory is wrapped by the error of a local delete whose path names
// a directory: the store deletes files only, and no retry changes that.
var ErrIsDirectory = errors.New("is a directory")

// Local files: every object is a regular file; directories are created on
// demand by Write and never reported or removed.
//
// No method follows a symbolic link. Every path is resolved from "/" one
// component at a time, each directory opened as an *os.Root below the one
// before it (so that nothing resolves outside it) and accepted only if it is
// the directory Lstat saw, not a link; an entry replaced in between is looked
// at again. On Linux a directory is first opened in one step, accepted only
// if the kernel reached it without a link (openDirNoLinks); the walk runs
// when that fails. A link in any directory component thus fails the operation with
// an error wrapping ErrSymlink, also when the link appears while the path is
// being resolved. The operation then acts on the last component relative to
// the opened directory:
//
//   - Write fails on a linked directory component, creates missing
//     directories without following links, and renames its file over the
//     target name, which replaces a link there rather than writing through
//     it.
//   - Read fails, with ErrSymlink, when the object itself is a link.
//   - Exists fails, with ErrSymlink, when the object itself is a link.
//   - Delete of an object that is itself a link removes the link only; its
//     target is never touched.
//   - List does not report or descend into links.
//
// Concurrent Writes share their durability step (group commit, see
// groupSync), unless the store was made with syncEach
// (Config.LocalSyncEachWrite).
type localStorage struct {
	deleteConcurrency int
	// group syncs the files of concurrent writes together; nil: each write
	// syncs its own file and directory.
	group *groupSync
}

func newLocalStorage(deleteConcurrency int, syncEach bool) *localStorage {
	s := &localStorage{deleteConcurrency: deleteConcurrency}
	if !syncEach {
		s.group = &groupSync{parallel: maxFlushParallel}
	}
	return s
}

// tmpPrefix starts the names of Write's temporary files. List skips them.
const tmpPrefix = ".floe-tmp-"

const (
	dirPerm  = 0o755
	filePerm = 0o644
)

// splitKey splits a cleaned absolute path into its directory, ending in "/",
// and its last component, which is empty only for "/".
func splitKey(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	return key[:i+1], key[i+1:]
}

func symlinkErr(path string) error {
	return fmt.Errorf("%w at %s", ErrSymlink, path)
}

// openDir opens the directory dir (absolute, ending in "/") without following
// a symbolic link in any of its components. With create, missing directories
// are created (mode dirPerm), also without following links. It fails with an
// error wrapping ErrSymlink when a component is a link, and with one for
// which isMissing is true when a component does not exist (without create) or
// is not a directory.
//
// A directory that exists and is reached without a link is opened in one
// step where the kernel can check the whole path at once (openDirNoLinks);
// everything else takes the walk.
func openDir(dir string, create bool) (*os.Root, error) {
	if root, ok := openDirNoLinks(dir); ok {
		return root, nil
	}
	root, err := os.OpenRoot("/")
	if err != nil {
		return nil, err
	}
	path := "/"
	for name := range strings.SplitSeq(strings.Trim(dir, "/"), "/") {
		if name == "" {
			continue
		}
		path += name
		child, err := openChild(root, path, name, create)
		_ = root.Close()
		if err != nil {
			return nil, err
		}
		root = child
		path += "/"
	}
	return root, nil
}

// maxReopen bounds how often an open is retried when the entry it opened is
// not the one Lstat saw just before, because the entry was replaced (renamed
// over, or removed and recreated) in between.
const maxReopen = 10

// errChanged is returned when an entry kept being replaced while it was being
// opened.
var errChanged = errors.New("replaced while being opened")

// errNotRegular is returned for an object that is not a regular file: a
// directory, a FIFO, a device or a socket.
var errNotRegular = errors.New("not a regular file")

// openChild opens the directory name in parent, whose full path is path,
// without following a link. See openDir.
func openChild(parent *os.Root, path, name string, create bool) (*os.Root, error) {
	for range maxReopen {
		fi, err := parent.Lstat(name)
		if create && errors.Is(err, fs.ErrNotExist) {
			// Mkdir does not follow a link at name; if one appeared, Lstat
			// below reports it.
			if err := parent.Mkdir(name, dirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, &fs.PathError{Op: "mkdir", Path: path, Err: unwrapPathErr(err)}
			}
			fi, err = parent.Lstat(name)
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: path, Err: unwrapPathErr(err)}
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, symlinkErr(path)
		}
		if !fi.IsDir() {
			return nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOTDIR}
		}
		child, err := parent.OpenRoot(name)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: unwrapPathErr(err)}
		}
		// OpenRoot follows a link that stays inside parent. Only the
		// directory Lstat saw is accepted; anything else was put at name
		// since, and the next Lstat tells whether it is a link.
		cfi, err := child.Stat(".")
		if err != nil {
			_ = child.Close()
			return nil, &fs.PathError{Op: "stat", Path: path, Err: unwrapPathErr(err)}
		}
		if os.SameFile(fi, cfi) {
			return child, nil
		}
		_ = child.Close()
	}
	return nil, &fs.PathError{Op: "open", Path: path, Err: errChanged}
}

// unwrapPathErr strips the *fs.PathError that os.Root methods return, whose
// path is relative to the root, so that the caller can name the full path.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// write writes data to a temporary file in the target directory, syncs it and
// renames it over the target, then syncs the directory, so the object is
// replaced atomically and durably. It fails, writing nothing, when a
// directory component of the target is a symbolic link. With group commit
// the sync, rename and directory sync are those of the next flush, shared
// with concurrent writes (groupSync); write returns once they are done.
func (s *localStorage) write(ctx context.Context, uri string, l location, data []byte) (err error) {
	if err := ctx.Err(); err != nil {
		return objErr("write", uri, err)
	}
	dir, name := splitKey(l.key)
	if name == "" {
		return objErr("write", uri, fmt.Errorf("%w: not a file path", ErrInvalidURI))
	}
	root, err := openDir(dir, true)
	if err != nil {
		return objErr("write", uri, err)
	}
	defer func() { _ = root.Close() }()
	var dirInfo fs.FileInfo
	if s.group != nil {
		if dirInfo, err = root.Stat("."); err != nil {
			return objErr("write", uri, &fs.PathError{Op: "stat", Path: dir, Err: unwrapPathErr(err)})
		}
	}
	f, tmp, err := createTemp(root, name)
	if err != nil {
		return objErr("write", uri, err)
	}
	handedOver := false
	defer func() {
		if err != nil && !handedOver {
			_ = f.Close()
			_ = root.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return objErr("write", uri, err)
	}
	if err = f.Chmod(filePerm); err != nil {
		return objErr("write", uri, err)
	}
	if s.group != nil {
		// The flush owns the file from here: it closes it, and removes it
		// if the write fails.
		handedOver = true
		if err = s.group.commit(&pendingWrite{dir: root, dirInfo: dirInfo, f: f, tmp: tmp, name: name, key: l.key}); err != nil {
			return objErr("write", uri, err)
		}
		return nil
	}
	if err = f.Sync(); err != nil {
		return objErr("write", uri, err)
	}
	if err = f.Close(); err != nil {
		return objErr("write", uri, err)
	}
	// Renaming replaces whatever entry name holds, a link included, and never
	// writes through it.
	if err = root.Rename(tmp, name); err != nil {
		return objErr("write", uri, &fs.PathError{Op: "rename", Path: l.key, Err: unwrapPathErr(err)})
	}
	if err := syncDir(root); err != nil {
		// The rename happened; only its durability is in doubt.
		return objErr("write", uri, fmt.Errorf("sync directory: %w", err))
	}
	return nil
}

// createTemp creates a new file (mode 0600) in root whose name starts with
// tmpPrefix and name, and returns it with its name. O_EXCL makes it fail
// rather than open an existing file or follow a link.
func createTemp(root *os.Root, name string) (*os.File, string, error) {
	for range 10000 {
		// Keep the temporary name within NAME_MAX however long the target is.
		tmp := tmpPrefix + truncate(name, 64) + "-" + strconv.FormatUint(rand.Uint64(), 36)
		f, err := root.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", &fs.PathError{Op: "create", Path: tmp, Err: unwrapPathErr(err)}
		}
		return f, tmp, nil
	}
	return nil, "", errors.New("no unused temporary file name")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func syncDir(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// read fails with an error wrapping ErrSymlink when the object or a directory
// above it is a symbolic link, and with one wrapping ErrNotFound when it or a
// directory above it is missing.
func (s *localStorage) read(ctx context.Context, uri string, l location) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, objErr("read", uri, err)
	}
	data, err := readFile(l.key)
	if err != nil {
		return nil, objErr("read", uri, localErr(err))
	}
	return data, nil
}

func readFile(key string) ([]byte, error) {
	dir, name := splitKey(key)
	if name == "" {
		return nil, &fs.PathError{Op: "read", Path: key, Err: syscall.EISDIR}
	}
	root, err := openDir(dir, false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = root.Close() }()
	for range maxReopen {
		data, err := readName(root, key, name)
		if !errors.Is(err, errChanged) {
			return data, err
		}
	}
	return nil, &fs.PathError{Op: "open", Path: key, Err: errChanged}
}

// readName reads the file name in root, whose full path is key. It fails with
// errChanged when the file opened is not the one Lstat saw.
func readName(root *os.Root, key, name string) ([]byte, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: key, Err: unwrapPathErr(err)}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, symlinkErr(key)
	}
	if !fi.Mode().IsRegular() {
		// A FIFO's open waits for a writer, and its read for data, for
		// ever; a device reads without end.
		return nil, &fs.PathError{Op: "read", Path: key, Err: fmt.Errorf("%w (%s)", errNotRegular, fi.Mode().Type())}
	}
	// O_NONBLOCK: should a FIFO be put at name after the Lstat, its open
	// returns at once (and SameFile refuses it) instead of waiting for a
	// writer. A regular file's reads ignore the flag.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: key, Err: unwrapPathErr(err)}
	}
	defer func() { _ = f.Close() }()
	// Open follows a link that stays inside the directory. Only the file
	// Lstat saw is accepted; anything else was put at name since (a Write
	// renaming a new version over it, or a link).
	ofi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !os.SameFile(fi, ofi) {
		return nil, errChanged
	}
	if ofi.Size() > MaxReadBytes {
		return nil, fmt.Errorf("%w: %d bytes, over %d", ErrTooLarge, ofi.Size(), MaxReadBytes)
	}
	var buf bytes.Buffer
	buf.Grow(int(ofi.Size()) + 512)
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxReadBytes+1)); err != nil {
		return nil, err
	}
	if buf.Len() > MaxReadBytes {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, MaxReadBytes)
	}
	return buf.Bytes(), nil
}

// exists reports false for a missing path and for anything but a regular
// file. It fails with an error wrapping ErrSymlink when the object or a
// directory above it is a symbolic link.
func (s *localStorage) exists(ctx context.Context, uri string, l location) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, objErr("exists", uri, err)
	}
	dir, name := splitKey(l.key)
	if name == "" {
		return false, nil
	}
	root, err := openDir(dir, false)
	if err != nil {
		if isMissing(err) {
			return false, nil
		}
		return false, objErr("exists", uri, err)
	}
	defer func() { _ = root.Close() }()
	fi, err := root.Lstat(name)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return false, objErr("exists", uri, symlinkErr(l.key))
	case err == nil:
		return fi.Mode().IsRegular(), nil
	case isMissing(err):
		return false, nil
	default:
		return false, objErr("exists", uri, &fs.PathError{Op: "lstat", Path: l.key, Err: unwrapPathErr(err)})
	}
}

// isMissing reports whether err means the path does not exist, including
// when a parent is a regular file.
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// localErr maps missing files to ErrNotFound, keeping the OS error text.
func localErr(err error) error {
	if isMissing(err) {
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	}
	return err
}

// delete removes the files with at most s.deleteConcurrency goroutines.
// Directories are refused rather than removed. A file below a directory
// component that is a symbolic link is not deleted: its error wraps
// ErrSymlink. A file that is itself a link is deleted by removing the link.
//
// Files sharing a directory are handled in chunks, each resolving the
// directory once, so that a batch does not walk the same path per file.
func (s *localStorage) delete(ctx context.Context, uris []string, locs []location) []error {
	errs := make([]error, len(uris))
	var dirs []string
	byDir := make(map[string][]int)
	for i, l := range locs {
		dir, _ := splitKey(l.key)
		if _, ok := byDir[dir]; !ok {
			dirs = append(dirs, dir)
		}
		byDir[dir] = append(byDir[dir], i)
	}
	// Chunks small enough that one directory still spreads over every
	// goroutine.
	chunk := max(1, (len(uris)+s.deleteConcurrency-1)/s.deleteConcurrency)
	sem := make(chan struct{}, s.deleteConcurrency)
	var wg sync.WaitGroup
	fail := func(idx []int, err error) {
		for _, i := range idx {
			errs[i] = objErr("delete", uris[i], err)
		}
	}
	for _, dir := range dirs {
		idx := byDir[dir]
		for len(idx) > 0 {
			part := idx[:min(chunk, len(idx))]
			idx = idx[len(part):]
			if err := ctx.Err(); err != nil {
				fail(part, err)
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				fail(part, ctx.Err())
				continue
			}
			wg.Go(func() {
				defer func() { <-sem }()
				s.deleteIn(ctx, dir, part, uris, locs, errs)
			})
		}
	}
	wg.Wait()
	return errs
}

// deleteIn deletes the files locs[i] for i in idx, all in directory dir,
// setting errs[i].
func (s *localStorage) deleteIn(ctx context.Context, dir string, idx []int, uris []string, locs []location, errs []error) {
	root, err := openDir(dir, false)
	if err != nil {
		for _, i := range idx {
			if !isMissing(err) && !errors.Is(err, syscall.ENAMETOOLONG) {
				errs[i] = objErr("delete", uris[i], err)
			}
		}
		return
	}
	defer func() { _ = root.Close() }()
	for _, i := range idx {
		if err := ctx.Err(); err != nil {
			errs[i] = objErr("delete", uris[i], err)
			continue
		}
		if err := deleteName(root, locs[i].key); err != nil {
			errs[i] = objErr("delete", uris[i], err)
		}
	}
}

// deleteName removes the last component of key from root, the directory
// holding it. A missing file counts as deleted, and so does a name longer
// than the file system allows (no such file can exist); a directory is
// refused (ErrIsDirectory); a symbolic link is removed itself.
func deleteName(root *os.Root, key string) error {
	_, name := splitKey(key)
	if name == "" {
		return ErrIsDirectory
	}
	fi, err := root.Lstat(name)
	if err != nil {
		if isMissing(err) || errors.Is(err, syscall.ENAMETOOLONG) {
			return nil
		}
		return &fs.PathError{Op: "lstat", Path: key, Err: unwrapPathErr(err)}
	}
	if fi.IsDir() {
		return ErrIsDirectory
	}
	if err := root.Remove(name); err != nil && !isMissing(err) {
		return &fs.PathError{Op: "remove", Path: key, Err: unwrapPathErr(err)}
	}
	return nil
}

// list walks the directory holding the prefix in lexical order of full paths.
// Sorting each directory's entries by name, with "/" appended to directory
// names, yields the same order as sorting the complete paths. It fails with
// an error wrapping ErrSymlink when a directory component of the prefix is a
// symbolic link; links found during the walk are skipped.
func (s *localStorage) list(ctx context.Context, prefix string, l location, fn func(uri string) error) error {
	// The parsed key is cleaned, which drops a trailing slash; put it back so
	// that "/a/b/" does not match "/a/bc".
	p := l.key
	if strings.HasSuffix(prefix, "/") && p != "/" {
		p += "/"
	}
	dir, _ := splitKey(p)
	if err := ctx.Err(); err != nil {
		return objErr("list", prefix, err)
	}
	root, err := openDir(dir, false)
	if err != nil {
		if isMissing(err) {
			return nil
		}
		return objErr("list", prefix, err)
	}
	defer func() { _ = root.Close() }()
	w := &walker{ctx: ctx, prefix: p, loc: l, fn: fn}
	err = w.walk(root, dir)
	var ce callbackError
	if errors.As(err, &ce) {
		return ce.err
	}
	if err != nil {
		return objErr("list", prefix, err)
	}
	return nil
}

type walker struct {
	ctx    context.Context
	prefix string
	loc    location
	fn     func(uri string) error
}

// callbackError carries fn's error out of the walk untouched.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// walk visits root, the directory at dir, whose path ends in "/".
func (w *walker) walk(root *os.Root, dir string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	d, err := root.Open(".")
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: unwrapPathErr(err)}
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		return &fs.PathError{Op: "readdir", Path: dir, Err: unwrapPathErr(err)}
	}
	type entry struct {
		name  string // with "/" appended for directories
		isDir bool
	}
	list := make([]entry, 0, len(entries))
	for _, e := range entries {
		// Links are neither directories nor regular files here.
		switch {
		case e.IsDir():
			list = append(list, entry{e.Name() + "/", true})
		case e.Type().IsRegular() && !strings.HasPrefix(e.Name(), tmpPrefix):
			list = append(list, entry{e.Name(), false})
		}
	}
	slices.SortFunc(list, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for _, e := range list {
		full := dir + e.name
		if e.isDir {
			// Descend only where the prefix can still match.
			if strings.HasPrefix(full, w.prefix) || strings.HasPrefix(w.prefix, full) {
				if err := w.descend(root, full, strings.TrimSuffix(e.name, "/")); err != nil {
					return err
				}
			}
			continue
		}
		if !strings.HasPrefix(full, w.prefix) {
			continue
		}
		if err := w.fn(w.loc.uriFor(full)); err != nil {
			return callbackError{err}
		}
	}
	return nil
}

// descend walks the subdirectory name of parent, whose path full ends in
// "/". A subdirectory that disappeared or became a link since it was read is
// skipped.
func (w *walker) descend(parent *os.Root, full, name string) error {
	child, err := openChild(parent, strings.TrimSuffix(full, "/"), name, false)
	if err != nil {
		if isMissing(err) || errors.Is(err, ErrSymlink) {
			return nil
		}
		return err
	}
	defer func() { _ = child.Close() }()
	return w.walk(child, full)
}

// removeEmptyDirs removes the directory key and the directories under it
// that are empty, deepest first, and returns how many it removed. A
// directory holding anything that is not an empty directory (a file, a
// link, the temporary file of a write in flight) stays, with every
// directory above it. Links are never followed, and the file system's root
// is never a candidate. A missing directory is no error.
func (s *localStorage) removeEmptyDirs(ctx context.Context, uri string, l location) (int, error) {
	key := strings.TrimSuffix(l.key, "/")
	if key == "" {
		return 0, nil
	}
	parentDir, name := splitKey(key)
	parent, err := openDir(parentDir, false)
	if err != nil {
		if isMissing(err) {
			return 0, nil
		}
		return 0, objErr("remove empty directories", uri, err)
	}
	defer func() { _ = parent.Close() }()
	n, err := pruneDir(ctx, parent, key, name, 0)
	if err != nil {
		return n, objErr("remove empty directories", uri, err)
	}
	return n, nil
}

// maxPruneDepth bounds how deep pruneDir goes below a location: each level
// holds a directory open, and a tree deeper than any table's (partitions
// nest a few levels) is left as it is rather than run the process out of
// file descriptors.
const maxPruneDepth = 64

// pruneDir removes the empty directories under the directory name of
// parent (full path full), then name itself if it is left empty.
func pruneDir(ctx context.Context, parent *os.Root, full, name string, depth int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if depth > maxPruneDepth {
		return 0, nil
	}
	dir, err := openChild(parent, full, name, false)
	if err != nil {
		if isMissing(err) || errors.Is(err, ErrSymlink) || errors.Is(err, syscall.ENOTDIR) {
			return 0, nil
		}
		return 0, err
	}
	d, err := dir.Open(".")
	if err != nil {
		_ = dir.Close()
		return 0, &fs.PathError{Op: "open", Path: full, Err: unwrapPathErr(err)}
	}
	entries, err := d.ReadDir(-1)
	_ = d.Close()
	if err != nil {
		_ = dir.Close()
		return 0, &fs.PathError{Op: "readdir", Path: full, Err: unwrapPathErr(err)}
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n, err := pruneDir(ctx, dir, full+"/"+e.Name(), e.Name(), depth+1)
		removed += n
		if err != nil {
			_ = dir.Close()
			return removed, err
		}
	}
	_ = dir.Close()
	switch err := rmdirAt(parent, name); {
	case err == nil:
		return removed + 1, nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.ENOTDIR), isMissing(err):
		// Something is left in it, or it was replaced or removed meanwhile.
		return removed, nil
	default:
		return removed, &fs.PathError{Op: "rmdir", Path: full, Err: unwrapPathErr(err)}
	}
}
