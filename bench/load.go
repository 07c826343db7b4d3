package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// maxOpsPerClient bounds a load client's loop independently of the clock.
const maxOpsPerClient = 10_000_000

// LoadResult is one closed-loop load measurement: clients goroutines, each
// sending its next operation as soon as the previous one was answered.
type LoadResult struct {
	Clients    int
	Elapsed    time.Duration // from the start signal until the last client stopped
	OK         int
	Errors     int
	FirstError string
	P50, P99   time.Duration // latency of successful operations
	// CPU is the CPU time (user+system) the measured processes spent
	// between the start signal and the end, when the caller measured it.
	CPU time.Duration
	// Machine is how busy the whole machine was over the run.
	Machine MachineLoad
}

// PerSecond is the rate of successful operations.
func (r LoadResult) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// CPUPerOp is the CPU time spent per successful operation.
func (r LoadResult) CPUPerOp() time.Duration {
	if r.OK == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.OK)
}

// loadOp performs operation j of client i. A non-nil error counts as a
// failed operation; the load goes on.
type loadOp func(ctx context.Context, client, j int) error

// runLoad runs clients concurrent loops of op for duration, after each
// client has run warm operations (uncounted; a failure there is an error).
// cpu, if set, returns the CPU time consumed so far by whatever is measured;
// the difference over the measured window is reported.
func runLoad(ctx context.Context, clients int, duration time.Duration, warm int, op loadOp, cpu func() time.Duration) (LoadResult, error) {
	res := LoadResult{Clients: clients}
	if clients < 1 || duration <= 0 {
		return res, fmt.Errorf("load: %d clients, duration %s", clients, duration)
	}
	type clientResult struct {
		ok, errs int
		firstErr string
		lat      []time.Duration
		warmErr  error
	}
	results := make([]clientResult, clients)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var stopAt time.Time // written before start is closed, read after
	for i := range clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			cr := &results[i]
			j := 0
			for ; j < warm; j++ {
				if err := op(ctx, i, j); err != nil {
					cr.warmErr = fmt.Errorf("client %d, warm-up op %d: %w", i, j, err)
					break
				}
			}
			ready.Done()
			<-start
			if cr.warmErr != nil {
				return
			}
			cr.lat = make([]time.Duration, 0, 1024)
			for n := 0; n < maxOpsPerClient; n, j = n+1, j+1 {
				if ctx.Err() != nil || !time.Now().Before(stopAt) {
					return
				}
				t0 := time.Now()
				err := op(ctx, i, j)
				d := time.Since(t0)
				if err != nil {
					cr.errs++
					if cr.firstErr == "" {
						cr.firstErr = err.Error()
					}
					continue
				}
				cr.ok++
				cr.lat = append(cr.lat, d)
			}
		}()
	}
	ready.Wait()
	var cpu0 time.Duration
	if cpu != nil {
		cpu0 = cpu()
	}
	m0 := readMachineCPU()
	t0 := time.Now()
	stopAt = t0.Add(duration)
	close(start)
	done.Wait()
	res.Elapsed = time.Since(t0)
	res.Machine = machineLoadSince(m0)
	if cpu != nil {
		res.CPU = cpu() - cpu0
	}
	var lat []time.Duration
	for _, cr := range results {
		if cr.warmErr != nil {
			return res, cr.warmErr
		}
		res.OK += cr.ok
		res.Errors += cr.errs
		if res.FirstError == "" {
			res.FirstError = cr.firstErr
		}
		lat = append(lat, cr.lat...)
	}
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return res, ctx.Err()
}

// bgLoad is a closed load that runs until stopped: the background load of
// a measurement that has no fixed duration.
type bgLoad struct {
	stopCh chan struct{}
	done   sync.WaitGroup
	t0     time.Time
	m0     machineCPU
	res    []clientLoad
}

type clientLoad struct {
	ok, errs int
	firstErr string
	lat      []time.Duration
}

// startLoad runs clients concurrent loops of op (after warm uncounted
// operations each; a failure there is an error) until stop.
func startLoad(ctx context.Context, clients, warm int, op loadOp) (*bgLoad, error) {
	b := &bgLoad{stopCh: make(chan struct{}), res: make([]clientLoad, clients)}
	warmErrs := make([]error, clients)
	var ready sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		ready.Add(1)
		b.done.Add(1)
		go func() {
			defer b.done.Done()
			j := 0
			for ; j < warm; j++ {
				if err := op(ctx, i, j); err != nil {
					warmErrs[i] = fmt.Errorf("client %d, warm-up op %d: %w", i, j, err)
					break
				}
			}
			ready.Done()
			<-start
			if warmErrs[i] != nil {
				return
			}
			cr := &b.res[i]
			for n := 0; n < maxOpsPerClient; n, j = n+1, j+1 {
				select {
				case <-b.stopCh:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := op(ctx, i, j)
				d := time.Since(t0)
				if err != nil {
					cr.errs++
					if cr.firstErr == "" {
						cr.firstErr = err.Error()
					}
					continue
				}
				cr.ok++
				cr.lat = append(cr.lat, d)
			}
		}()
	}
	ready.Wait()
	b.m0 = readMachineCPU()
	b.t0 = time.Now()
	close(start)
	for _, err := range warmErrs {
		if err != nil {
			close(b.stopCh)
			b.done.Wait()
			return nil, err
		}
	}
	return b, nil
}

// stop ends the load and returns what it measured from its start.
func (b *bgLoad) stop() LoadResult {
	close(b.stopCh)
	b.done.Wait()
	res := LoadResult{Clients: len(b.res), Elapsed: time.Since(b.t0), Machine: machineLoadSince(b.m0)}
	var lat []time.Duration
	for _, cr := range b.res {
		res.OK += cr.ok
		res.Errors += cr.errs
		if res.FirstError == "" {
			res.FirstError = cr.firstErr
		}
		lat = append(lat, cr.lat...)
	}
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return res
}
