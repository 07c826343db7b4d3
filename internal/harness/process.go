package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ExitTimeout bounds every wait for a process to exit: after the stop
// signal (then SIGKILL follows) and after SIGKILL.
const ExitTimeout = 15 * time.Second

// ProcessConfig describes a child process for NewProcess.
type ProcessConfig struct {
	// Name names the process in errors, log markers and crash reports
	// ("n1", "versitygw").
	Name string
	Bin  string
	Args []string
	// Env is the process's environment; nil: the caller's (os.Environ).
	// EnvWithout builds one without selected variables.
	Env []string
	// LogPath receives stdout and stderr of every start, appended, each
	// start preceded by a marker line (see Start).
	LogPath string
	// Tool names the starter in the marker line ("floebench",
	// "jepsen-lite"); default "harness".
	Tool string
	// StopSignal asks the process to exit cleanly (Stop); default SIGTERM.
	StopSignal syscall.Signal
}

// Process is a child process with a fixed command line: every Start runs
// exactly the same one again, so a restarted process comes back with the
// same flags and data directory, as it would under a supervisor.
//
// Exits are classified: an exit that follows a signal sent through this
// Process (other than SIGSTOP and SIGCONT) is expected; any other exit is a
// crash, recorded with the tail of the log for TakeCrashes.
//
// All methods are safe for concurrent use.
type Process struct {
	cfg ProcessConfig

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd has been reaped
	waitErr  error         // cmd.Wait's result, valid once exited is closed
	paused   bool
	expected bool // the current run was signalled to exit
	starts   int
	crashes  []string
}

// NewProcess returns a process that has not been started.
func NewProcess(cfg ProcessConfig) *Process {
	if cfg.Tool == "" {
		cfg.Tool = "harness"
	}
	if cfg.StopSignal == 0 {
		cfg.StopSignal = syscall.SIGTERM
	}
	cfg.Args = append([]string(nil), cfg.Args...)
	return &Process{cfg: cfg}
}

// Name is ProcessConfig.Name.
func (p *Process) Name() string { return p.cfg.Name }

// LogPath is the file every start appends stdout and stderr to.
func (p *Process) LogPath() string { return p.cfg.LogPath }

// CommandLine is the process's command line, quoted for a POSIX shell.
func (p *Process) CommandLine() string {
	return ShellJoin(append([]string{p.cfg.Bin}, p.cfg.Args...))
}

// Start starts the process. It first appends to the log the line
//
//	=== <tool>: start #<n> at <UTC time>: <command line>
//
// It fails if the process is running (paused counts as running), if the
// log cannot be opened, or if the binary cannot be executed; it does not
// wait for the process to serve anything.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("%s is already running", p.cfg.Name)
	}
	f, err := os.OpenFile(p.cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.cfg.Name, err)
	}
	p.starts++
	fmt.Fprintf(f, "=== %s: start #%d at %s: %s\n", p.cfg.Tool, p.starts, time.Now().UTC().Format(time.RFC3339Nano), p.CommandLine())
	cmd := exec.Command(p.cfg.Bin, p.cfg.Args...)
	cmd.Env = p.cfg.Env
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.cfg.Name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.waitErr, p.paused, p.expected = cmd, exited, nil, false, false
	go p.reap(cmd, f, exited)
	return nil
}

// reap waits for cmd, records a crash if nobody asked it to exit, and
// closes exited.
func (p *Process) reap(cmd *exec.Cmd, f *os.File, exited chan struct{}) {
	werr := cmd.Wait()
	f.Close()
	p.mu.Lock()
	crashed := !p.expected
	p.mu.Unlock()
	crash := ""
	if crashed { // read the log outside the lock
		crash = fmt.Sprintf("%s exited on its own (%v); log tail:\n%s", p.cfg.Name, werr, LogTail(p.cfg.LogPath, 30))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waitErr = werr
	if crash != "" {
		p.crashes = append(p.crashes, crash)
	}
	p.paused = false
	close(exited)
}

func (p *Process) runningLocked() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Running reports whether the process has been started and not reaped. A
// paused process is running.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// Paused reports whether the process is running and stopped by Pause.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked() && p.paused
}

// Serving reports whether the process is running and not paused: whether
// it can answer at all.
func (p *Process) Serving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked() && !p.paused
}

// Pid returns the process ID, 0 when the process is not running.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the running process; it fails if the process is not
// running. Any signal but SIGSTOP and SIGCONT marks the exit it may cause
// as expected; SIGSTOP and SIGCONT set and clear Paused.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("%s is not running", p.cfg.Name)
	}
	if sig != sigStop && sig != sigCont {
		p.expected = true
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%v %s: %w", sig, p.cfg.Name, err)
	}
	switch sig {
	case sigStop:
		p.paused = true
	case sigCont:
		p.paused = false
	}
	return nil
}

// Pause stops the running process with SIGSTOP: it keeps its sockets and
// memory but answers nothing until Continue.
func (p *Process) Pause() error { return p.Signal(sigStop) }

// Continue resumes a paused process with SIGCONT.
func (p *Process) Continue() error { return p.Signal(sigCont) }

// Wait waits until the process has been reaped, at most timeout. It returns
// nil at once if the process was never started or has exited.
func (p *Process) Wait(timeout time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %s", p.cfg.Name, timeout)
	}
}

// Kill sends SIGKILL and waits, at most ExitTimeout, until the process is
// reaped. It fails if the process is not running or outlives the wait.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.Wait(ExitTimeout)
}

// Stop continues the process if it is paused, sends the stop signal, and
// kills it if it has not exited within ExitTimeout. It returns nil when the
// process was not running or exited on the stop signal, and an error when
// it had to be killed (it is reaped by then either way).
func (p *Process) Stop() error {
	if !p.Running() {
		return nil
	}
	_ = p.Signal(sigCont)
	_ = p.Signal(p.cfg.StopSignal)
	if p.Wait(ExitTimeout) == nil {
		return nil
	}
	_ = p.Signal(syscall.SIGKILL)
	_ = p.Wait(ExitTimeout) // SIGKILL cannot be ignored; Wait returns promptly
	return fmt.Errorf("%s did not exit within %s of %v; killed", p.cfg.Name, ExitTimeout, p.cfg.StopSignal)
}

// exitError returns why the last run ended, or nil while it runs.
func (p *Process) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.runningLocked() {
		return nil
	}
	if p.waitErr == nil {
		return errors.New("exit status 0")
	}
	return p.waitErr
}

// TakeCrashes returns the exits nobody asked for since the last call, each
// with the tail of the log, and forgets them.
func (p *Process) TakeCrashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.crashes
	p.crashes = nil
	return c
}

// LogTail returns up to the last n lines of the process's log.
func (p *Process) LogTail(n int) string { return LogTail(p.cfg.LogPath, n) }

// LogSize returns the current size of the process's log, an offset for
// LogContains; 0 if it does not exist.
func (p *Process) LogSize() int64 { return LogSize(p.cfg.LogPath) }

// LogContains reports whether one line of the process's log, from byte
// offset from on, contains every one of subs.
func (p *Process) LogContains(from int64, subs ...string) bool {
	return LogContains(p.cfg.LogPath, from, subs...)
}

// EnvWithout returns the caller's environment (os.Environ) without the
// entries that begin with one of prefixes. End a prefix with "=" to drop
// one variable by its exact name: EnvWithout("AWS_", "LOGFILE=").
func EnvWithout(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		drop := false
		for _, p := range prefixes {
			drop = drop || strings.HasPrefix(kv, p)
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}
