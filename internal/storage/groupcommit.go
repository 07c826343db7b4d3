package storage

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
)

// Group commit for local writes.
//
// A local Write makes its file durable with an fsync of the file, a rename
// to its name and an fsync of the directory. Both fsyncs wait for the
// disk, and concurrent writers (a node's concurrent commits, each writing a metadata
// file) each waited for their own. groupSync lets them share the waits: a
// writer first writes its data to a temporary file on its own, then joins
// the next flush. A flush, run by one of its writers for all of them, has
// two stages:
//
//  1. fsync every file, then rename each file whose fsync succeeded to
//     its name;
//  2. fsync each directory that got a name, once however many of the
//     flush's files it got.
//
// No writer of a flush returns before its stage 2 has ended, so a Write
// still returns only once its file and its directory entry are durable
// (and, on error, with its temporary file removed and its name untouched,
// or renamed but of unknown durability when the directory fsync failed).
// The temporary names need no directory fsync of their own: after a crash
// a temporary file is garbage either way, and List never reports one.
//
// Nobody waits to gather a batch. A writer arriving while no flush runs
// starts one at once, alone, so a write without concurrency costs what it
// did before. Writers arriving while a flush is in stage 1 queue; when
// that flush moves to stage 2, the first of them starts the next flush for
// every writer queued by then, so stage 2 of one flush overlaps stage 1 of
// the next. A waiting writer is not cancelled by its context: the flush it
// is part of is bounded by the disk, not by any one request.
//
// What a flush saves depends on the file system. Files of one flush that
// share a directory share its fsync. On a journaling file system (ext4's
// default, XFS) the fsyncs of a stage are absorbed by one or a few journal
// commits. On ext4 without a journal (the machine of
// docs/benchmarks-commit-path.md) every fsync writes its own inode, and the
// gain is fewer threads blocked in fsync at once (maxFlushParallel per
// stage) and fewer directory fsyncs.

// pendingWrite is one Write waiting for a flush: data written to tmp in
// dir, not yet synced.
type pendingWrite struct {
	dir     *os.Root
	dirInfo fs.FileInfo // identifies the directory (os.SameFile)
	f       *os.File
	tmp     string // temporary name in dir
	name    string // final name in dir
	key     string // full path, for errors
	err     error  // set by the flush
	// wake receives true when this writer is to run the next flush, false
	// when a flush has finished this write (err is set).
	wake chan bool
}

// groupSync runs the flushes of one localStorage.
type groupSync struct {
	// parallel bounds the fsyncs of one flush that run at once.
	parallel int
	// beforeFlush, when set (by tests), is called with each batch's size
	// as its flush starts.
	beforeFlush func(size int)

	mu    sync.Mutex
	queue []*pendingWrite
	// running: a flush is in stage 1, or the writer woken to run the next
	// one has not taken its batch yet. New writers queue while it is set.
	running bool
}

// maxFlushParallel bounds a flush's concurrent fsyncs: enough to keep the
// device's queue busy, few enough that a large batch does not start a
// thread per file.
const maxFlushParallel = 16

// commit makes w durable with the next flush and returns its outcome. The
// flush closes w.f and, when w fails, removes w.tmp; w.dir stays open and
// is the caller's.
func (g *groupSync) commit(w *pendingWrite) error {
	w.wake = make(chan bool, 1)
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if g.running {
		g.mu.Unlock()
		if lead := <-w.wake; !lead {
			return w.err
		}
		g.mu.Lock()
	}
	g.running = true
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()

	dirs := g.syncFiles(batch)

	// The next flush may sync its files while this one syncs its
	// directories: a two-stage pipeline, so that a writer arriving now
	// does not wait for the whole of this flush before its own starts.
	g.mu.Lock()
	var next *pendingWrite
	if len(g.queue) > 0 {
		next = g.queue[0] // runs the next flush; running stays true
	} else {
		g.running = false
	}
	g.mu.Unlock()
	if next != nil {
		next.wake <- true
	}

	g.syncDirs(dirs)
	for _, o := range batch {
		if o != w {
			o.wake <- false
		}
	}
	return w.err
}

// dirGroup is the writes of a flush renamed into one directory.
type dirGroup struct {
	writes []*pendingWrite
}

// syncFiles runs the first stage of a flush: fsync every file of batch,
// then rename each that synced. It returns the renamed writes grouped by
// directory; a write that failed has its err set and its temporary file
// removed.
func (g *groupSync) syncFiles(batch []*pendingWrite) []*dirGroup {
	if g.beforeFlush != nil {
		g.beforeFlush(len(batch))
	}
	g.each(batch, func(w *pendingWrite) {
		if err := w.f.Sync(); err != nil {
			w.err = err
		}
		if err := w.f.Close(); err != nil && w.err == nil {
			w.err = err
		}
	})
	var dirs []*dirGroup
	for _, w := range batch {
		if w.err == nil {
			// Renaming replaces whatever entry name holds, a link included,
			// and never writes through it.
			if err := w.dir.Rename(w.tmp, w.name); err != nil {
				w.err = &fs.PathError{Op: "rename", Path: w.key, Err: unwrapPathErr(err)}
			}
		}
		if w.err != nil {
			_ = w.dir.Remove(w.tmp)
			continue
		}
		var d *dirGroup
		for _, c := range dirs {
			if os.SameFile(c.writes[0].dirInfo, w.dirInfo) {
				d = c
				break
			}
		}
		if d == nil {
			d = &dirGroup{}
			dirs = append(dirs, d)
		}
		d.writes = append(d.writes, w)
	}
	return dirs
}

// syncDirs runs the second stage of a flush: one fsync per directory that
// got a name. When it fails, every write renamed into that directory fails:
// the renames happened, only their durability is in doubt.
func (g *groupSync) syncDirs(dirs []*dirGroup) {
	syncs := make([]*pendingWrite, len(dirs)) // one write standing for each directory
	for i, d := range dirs {
		syncs[i] = d.writes[0]
	}
	errs := make([]error, len(dirs))
	index := make(map[*pendingWrite]int, len(dirs))
	for i, w := range syncs {
		index[w] = i
	}
	g.each(syncs, func(w *pendingWrite) {
		errs[index[w]] = syncDir(w.dir)
	})
	for i, d := range dirs {
		if errs[i] != nil {
			for _, w := range d.writes {
				w.err = fmt.Errorf("sync directory: %w", errs[i])
			}
		}
	}
}

// each runs fn for every write of ws, at most g.parallel at a time, and
// returns when all have returned.
func (g *groupSync) each(ws []*pendingWrite, fn func(*pendingWrite)) {
	n := min(max(g.parallel, 1), len(ws))
	if n <= 1 {
		for _, w := range ws {
			fn(w)
		}
		return
	}
	var wg sync.WaitGroup
	work := make(chan *pendingWrite)
	for range n {
		wg.Go(func() {
			for w := range work {
				fn(w)
			}
		})
	}
	for _, w := range ws {
		work <- w
	}
	close(work)
	wg.Wait()
}
