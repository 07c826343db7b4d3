package purge

import "sync"

// deletePool is the node's one bounded pool of delete threads, shared by
// every job. Its queue holds as many batches as it has threads; when both
// are full, submit runs the batch on the caller's goroutine instead
// (caller-runs back-pressure): the producer walking a table stops pulling
// files until storage has absorbed a batch, and nothing is dropped.
type deletePool struct {
	tasks chan func()
	wg    sync.WaitGroup
	once  sync.Once
}

func newDeletePool(threads int) *deletePool {
	p := &deletePool{tasks: make(chan func(), threads)}
	p.wg.Add(threads)
	for range threads {
		go func() {
			defer p.wg.Done()
			for task := range p.tasks {
				task()
			}
		}()
	}
	return p
}

// submit runs task on the pool, or inline when the queue is full; it
// reports whether it ran inline. It must not be called after close.
func (p *deletePool) submit(task func()) (inline bool) {
	select {
	case p.tasks <- task:
		return false
	default:
		task()
		return true
	}
}

// close stops the threads once the queued tasks have run.
func (p *deletePool) close() {
	p.once.Do(func() { close(p.tasks) })
	p.wg.Wait()
}
