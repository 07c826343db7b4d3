package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of the utime and stime fields of /proc/<pid>/stat:
// USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the CPU time (user + system) process pid has used, 0 if
// it cannot be read (not Linux, process gone). pid 0 means this process.
func procCPU(pid int) time.Duration {
	return procCPUSplit(pid).Total()
}

// CPUSplit is a process's CPU time in user space and in the kernel.
type CPUSplit struct {
	User, System time.Duration
}

// Total is user plus system time.
func (c CPUSplit) Total() time.Duration { return c.User + c.System }

// Sub is the CPU used between before and c; zero when either sample is
// (a read that failed).
func (c CPUSplit) Sub(before CPUSplit) CPUSplit {
	if c.Total() == 0 || before.Total() == 0 {
		return CPUSplit{}
	}
	return CPUSplit{User: c.User - before.User, System: c.System - before.System}
}

// procCPUSplit returns the user and system CPU time process pid has used
// (utime and stime of /proc/<pid>/stat), zero if they cannot be read.
// pid 0 means this process.
func procCPUSplit(pid int) CPUSplit {
	path := "/proc/self/stat"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return CPUSplit{}
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return CPUSplit{}
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return CPUSplit{}
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return CPUSplit{}
	}
	return CPUSplit{User: time.Duration(ut) * time.Second / clockTicks, System: time.Duration(st) * time.Second / clockTicks}
}

// ProcMemory is a process's resident memory from /proc/<pid>/status.
type ProcMemory struct {
	RSS  int64 // VmRSS, bytes
	Peak int64 // VmHWM (peak RSS since the process started), bytes
}

// procMemory reads VmRSS and VmHWM of pid.
func procMemory(pid int) (ProcMemory, error) {
	var m ProcMemory
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.Peak
		default:
			continue
		}
		fs := strings.Fields(v) // "12345 kB"
		if len(fs) != 2 || fs[1] != "kB" {
			return m, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, k, v)
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			return m, err
		}
		*dst = n << 10
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if m.RSS == 0 {
		return m, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return m, nil
}

// clusterCPU returns the CPU time used so far by every running node.
func (c *Cluster) clusterCPU() time.Duration {
	var sum time.Duration
	for _, n := range c.Nodes {
		if pid := n.Pid(); pid > 0 {
			sum += procCPU(pid)
		}
	}
	return sum
}

// mib formats bytes as MiB.
func mib(b int64) string {
	if b < 10<<20 {
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// createFile creates path and its directory.
func createFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.Create(path)
}

// machineCPU is the aggregate "cpu" line of /proc/stat, in clock ticks.
type machineCPU struct {
	busy, iowait, total uint64
}

// readMachineCPU reads /proc/stat; zero when unavailable.
func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return machineCPU{}
	}
	var v [10]uint64
	for i := 1; i < len(f) && i <= len(v); i++ {
		v[i-1], _ = strconv.ParseUint(f[i], 10, 64)
	}
	// user nice system idle iowait irq softirq steal guest guest_nice;
	// guest time is already counted in user.
	m := machineCPU{iowait: v[4]}
	m.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
	m.total = m.busy + v[3] + v[4]
	return m
}

// MachineLoad is how busy the whole machine was over a measurement, every
// process included (other work on a shared machine shows up here).
type MachineLoad struct {
	Busy   float64 // fraction of all CPUs' time not idle and not waiting for I/O
	IOWait float64 // fraction of all CPUs' time idle with I/O outstanding
}

func machineLoadSince(m0 machineCPU) MachineLoad {
	m1 := readMachineCPU()
	dt := float64(m1.total - m0.total)
	if dt <= 0 || m0.total == 0 {
		return MachineLoad{}
	}
	return MachineLoad{Busy: float64(m1.busy-m0.busy) / dt, IOWait: float64(m1.iowait-m0.iowait) / dt}
}
