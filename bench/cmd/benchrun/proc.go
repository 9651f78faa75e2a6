package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopTimeout bounds a graceful stop (claimd drains in-flight calls) before
// the process group is killed.
const stopTimeout = 20 * time.Second

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// proc is a server process started by benchrun, in a process group of its
// own, killed by the kernel if benchrun dies first.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startProc starts bin with args, its output appended to logPath, in env
// (nil: benchrun's own).
func startProc(name, bin string, args []string, logPath string, env []string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited on its own.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to stopTimeout, then kills the process group.
// Stopping a stopped process is a no-op.
func (p *proc) stop() error {
	if p == nil || p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, stopTimeout)
	}
}

// procStat is what benchrun reads from /proc/<pid>/stat.
type procStat struct {
	ppid           int
	utime, stime   int64 // ticks of the process (all its threads)
	cutime, cstime int64 // ticks of its children it has waited for
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis start at field 3 (state).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	field := func(n int) int64 { // n is the 1-based field number of proc(5)
		v, _ := strconv.ParseInt(f[n-3], 10, 64)
		return v
	}
	return procStat{
		ppid: int(field(4)), utime: field(14), stime: field(15), cutime: field(16), cstime: field(17),
	}, nil
}

// readPeakRSS is a process's peak resident set size (VmHWM of
// /proc/<pid>/status) in MiB.
func readPeakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM %q: %w", pid, strings.TrimSpace(v), err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// meter reads the CPU seconds a process (or a group of them) has used so far.
type meter struct {
	name string
	read func() (float64, error)
}

// pidMeter meters one process and its threads.
func pidMeter(name string, pid int) meter {
	return meter{name: name, read: func() (float64, error) {
		st, err := readStat(pid)
		if err != nil {
			return 0, err
		}
		return float64(st.utime+st.stime) / clockTicks, nil
	}}
}

// treeMeter meters the process leader, its live children, and the children
// it has reaped: PostgreSQL's postmaster forks a backend per connection (in
// a session of its own, so a process group would miss it), and a backend
// that exits (pgbench's) leaves its CPU time in the postmaster's
// cutime/cstime.
func treeMeter(name string, leader int) meter {
	return meter{name: name, read: func() (float64, error) {
		lst, err := readStat(leader)
		if err != nil {
			return 0, err
		}
		ticks := lst.utime + lst.stime + lst.cutime + lst.cstime
		dirs, err := os.ReadDir("/proc")
		if err != nil {
			return 0, err
		}
		for _, d := range dirs {
			pid, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			st, err := readStat(pid)
			if err != nil || st.ppid != leader {
				continue // gone meanwhile, or not a child
			}
			ticks += st.utime + st.stime
		}
		return float64(ticks) / clockTicks, nil
	}}
}

// sumMeter meters several processes (the replicas of one service) as one.
func sumMeter(name string, ms ...meter) meter {
	return meter{name: name, read: func() (float64, error) {
		total := 0.0
		for _, m := range ms {
			v, err := m.read()
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	}}
}

// sample reads every meter.
func sample(ms []meter) (map[string]float64, error) {
	out := make(map[string]float64, len(ms))
	for _, m := range ms {
		v, err := m.read()
		if err != nil {
			return nil, fmt.Errorf("cpu of %s: %w", m.name, err)
		}
		out[m.name] = v
	}
	return out, nil
}

// measure runs run and returns the CPU seconds each meter used and the
// seconds the whole machine was busy meanwhile.
func measure(ms []meter, run func() error) (cpu map[string]float64, busy float64, err error) {
	busy0, err := machineBusy()
	if err != nil {
		return nil, 0, err
	}
	before, err := sample(ms)
	if err != nil {
		return nil, 0, err
	}
	if err := run(); err != nil {
		return nil, 0, err
	}
	after, err := sample(ms)
	if err != nil {
		return nil, 0, err
	}
	busy1, err := machineBusy()
	if err != nil {
		return nil, 0, err
	}
	return since(before, after), busy1 - busy0, nil
}

// since returns after-before for each meter.
func since(before, after map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(after))
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// machineBusy returns the CPU seconds all processes (and the kernel) have
// spent on the machine since boot: the first line of /proc/stat, minus idle
// and iowait. Over a run, what it adds beyond benchrun's own processes is
// other work sharing the cores (or kernel work charged to nobody).
func machineBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]:
		// guest time is already counted in user.
		if i != 3 && i != 4 && i < 8 {
			busy += n
		}
	}
	return float64(busy) / clockTicks, nil
}

// clientCPU is the CPU seconds an exited command used.
func clientCPU(cmd *exec.Cmd) float64 {
	if cmd.ProcessState == nil {
		return 0
	}
	return (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// postmasterPID reads the postmaster's pid from its data directory (the
// first line of postmaster.pid); testenv starts it under <dir>/data.
func postmasterPID(serverDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(serverDir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}
