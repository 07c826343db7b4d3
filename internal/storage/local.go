package storage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// Local files: every object is a regular file; directories are created on
// demand by Write and never reported or removed.
type localStorage struct {
	deleteConcurrency int
}

func newLocalStorage(deleteConcurrency int) *localStorage {
	return &localStorage{deleteConcurrency: deleteConcurrency}
}

// tmpPrefix starts the names of Write's temporary files. List skips them.
const tmpPrefix = ".floe-tmp-"

const (
	dirPerm  = 0o755
	filePerm = 0o644
)

// write writes data to a temporary file in the target directory, syncs it and
// renames it over the target, then syncs the directory, so the object is
// replaced atomically and durably.
func (s *localStorage) write(ctx context.Context, uri string, l location, data []byte) (err error) {
	if err := ctx.Err(); err != nil {
		return objErr("write", uri, err)
	}
	if l.key == "/" {
		return objErr("write", uri, fmt.Errorf("%w: not a file path", ErrInvalidURI))
	}
	dir, name := filepath.Split(l.key)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return objErr("write", uri, err)
	}
	// Keep the temporary name within NAME_MAX however long the target is.
	f, err := os.CreateTemp(dir, tmpPrefix+truncate(name, 64)+"-*")
	if err != nil {
		return objErr("write", uri, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return objErr("write", uri, err)
	}
	if err = f.Chmod(filePerm); err != nil {
		return objErr("write", uri, err)
	}
	if err = f.Sync(); err != nil {
		return objErr("write", uri, err)
	}
	if err = f.Close(); err != nil {
		return objErr("write", uri, err)
	}
	if err = os.Rename(tmp, l.key); err != nil {
		return objErr("write", uri, err)
	}
	if err := syncDir(dir); err != nil {
		// The rename happened; only its durability is in doubt.
		return objErr("write", uri, fmt.Errorf("sync directory: %w", err))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *localStorage) read(ctx context.Context, uri string, l location) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, objErr("read", uri, err)
	}
	data, err := os.ReadFile(l.key)
	if err != nil {
		return nil, objErr("read", uri, localErr(err))
	}
	return data, nil
}

func (s *localStorage) exists(ctx context.Context, uri string, l location) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, objErr("exists", uri, err)
	}
	fi, err := os.Stat(l.key)
	switch {
	case err == nil:
		return fi.Mode().IsRegular(), nil
	case isMissing(err):
		return false, nil
	default:
		return false, objErr("exists", uri, err)
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
// Directories are refused rather than removed.
func (s *localStorage) delete(ctx context.Context, uris []string, locs []location) []error {
	errs := make([]error, len(uris))
	sem := make(chan struct{}, s.deleteConcurrency)
	var wg sync.WaitGroup
	for i := range uris {
		if err := ctx.Err(); err != nil {
			errs[i] = objErr("delete", uris[i], err)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = objErr("delete", uris[i], ctx.Err())
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = s.deleteOne(uris[i], locs[i])
		})
	}
	wg.Wait()
	return errs
}

func (s *localStorage) deleteOne(uri string, l location) error {
	fi, err := os.Lstat(l.key)
	if err != nil {
		if isMissing(err) {
			return nil
		}
		return objErr("delete", uri, err)
	}
	if fi.IsDir() {
		return objErr("delete", uri, errors.New("is a directory"))
	}
	if err := os.Remove(l.key); err != nil && !isMissing(err) {
		return objErr("delete", uri, err)
	}
	return nil
}

// list walks the directory holding the prefix in lexical order of full paths.
// Sorting each directory's entries by name, with "/" appended to directory
// names, yields the same order as sorting the complete paths.
func (s *localStorage) list(ctx context.Context, prefix string, l location, fn func(uri string) error) error {
	// The parsed key is cleaned, which drops a trailing slash; put it back so
	// that "/a/b/" does not match "/a/bc".
	p := l.key
	if strings.HasSuffix(prefix, "/") && p != "/" {
		p += "/"
	}
	dir := p[:strings.LastIndexByte(p, '/')+1]
	w := &walker{ctx: ctx, prefix: p, loc: l, fn: fn}
	err := w.walk(dir)
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

// walk visits dir, whose path ends in "/".
func (w *walker) walk(dir string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if isMissing(err) {
			return nil
		}
		return err
	}
	type entry struct {
		name  string // with "/" appended for directories
		isDir bool
	}
	list := make([]entry, 0, len(entries))
	for _, e := range entries {
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
				if err := w.walk(full); err != nil {
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
