package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/claimd/claimd/internal/textclip"
)

// receiver is one receiver process (clients/guardspec/README.md, "Effect
// processes"): effectspec writes deliveries to its standard input and
// collects its gate and answer lines from its standard output. It runs in a
// process group of its own, and signals go to the whole group, so that a
// receiver started through a wrapper (a shell, npx) is stopped and killed
// with its real process.
type receiver struct {
	ctx  context.Context // effectspec's: an interrupt ends every wait
	name string          // "A", "B" or "R" in counts and messages
	cmd  *exec.Cmd
	pid  int // the ledger writer's PID: the ready line's "pid", else the child's

	// stdin is written by one goroutine from an unbounded queue, so that a
	// line sent to a stopped receiver never blocks the scenario.
	qmu     sync.Mutex
	qcond   *sync.Cond
	queue   [][]byte
	closing bool

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever the fields below change
	ready   bool
	at      map[string][]string
	answers map[string][]answer
	bad     []string // lines that break the protocol
	exited  bool
	exitErr error
	stderr  *tail
}

// startReceiver starts argv with "--claimd addr --namespace ns --db db"
// appended and waits, at most timeout, for its ready line.
func startReceiver(ctx context.Context, name string, argv []string, addr, ns, db string, verbose io.Writer, timeout time.Duration) (*receiver, error) {
	args := append(append([]string{}, argv[1:]...), "--claimd", addr, "--namespace", ns, "--db", db)
	cmd := exec.Command(argv[0], args...)
	cmd.SysProcAttr = procAttr()
	r := &receiver{
		ctx: ctx, name: name, cmd: cmd, changed: make(chan struct{}),
		at: map[string][]string{}, answers: map[string][]answer{},
		stderr: &tail{max: 40, prefix: "[receiver " + name + "] ", copy: verbose},
	}
	r.qcond = sync.NewCond(&r.qmu)
	cmd.Stderr = r.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start receiver %s (%s): %w", name, argv[0], err)
	}
	r.pid = cmd.Process.Pid
	go r.write(stdin)
	go r.read(stdout)
	if err := r.waitFor("its ready line", timeout, func() bool { return r.ready }); err != nil {
		r.kill(timeout)
		return nil, err
	}
	return r, nil
}

// send queues one line for the receiver's standard input.
func (r *receiver) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only effectspec's own maps and strings are sent
	}
	r.qmu.Lock()
	r.queue = append(r.queue, append(b, '\n'))
	r.qcond.Signal()
	r.qmu.Unlock()
}

// deliver sends a delivery; gate "" is none.
func (r *receiver) deliver(id string, lease, wait time.Duration, gate string, raise bool) {
	m := map[string]any{"deliver": id, "lease_ms": lease.Milliseconds(), "wait_ms": wait.Milliseconds()}
	if gate != gateNone {
		m["gate"] = gate
	}
	if raise {
		m["raise"] = true
	}
	r.send(m)
}

// release lets the event's delivery go on from its gate.
func (r *receiver) release(id string) { r.send(map[string]string{"go": id}) }

// write copies the queue to stdin until closeStdin; after a failed write
// (the receiver died) it drops what is queued.
func (r *receiver) write(stdin io.WriteCloser) {
	broken := false
	for {
		r.qmu.Lock()
		for len(r.queue) == 0 && !r.closing {
			r.qcond.Wait()
		}
		if len(r.queue) == 0 {
			r.qmu.Unlock()
			stdin.Close()
			return
		}
		line := r.queue[0]
		r.queue = r.queue[1:]
		r.qmu.Unlock()
		if !broken {
			if _, err := stdin.Write(line); err != nil {
				broken = true
			}
		}
	}
}

// closeStdin closes the receiver's standard input once the queued lines are
// written: the receiver answers what is under way and exits.
func (r *receiver) closeStdin() {
	r.qmu.Lock()
	r.closing = true
	r.qcond.Signal()
	r.qmu.Unlock()
}

// line is any line a receiver may write.
type line struct {
	Ready  *bool   `json:"ready"`
	PID    int     `json:"pid"`
	Event  *string `json:"event"`
	At     *string `json:"at"`
	Status *int    `json:"status"`
	Body   *string `json:"body"`
	Done   *bool   `json:"done"`
}

// read parses stdout until it closes, then waits for the process.
func (r *receiver) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		r.parse(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		r.protocolError("reading its standard output: %v", err)
	}
	err := r.cmd.Wait()
	r.mu.Lock()
	r.exited, r.exitErr = true, err
	r.notifyLocked()
	r.mu.Unlock()
}

func (r *receiver) parse(b []byte) {
	var l line
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&l); err != nil || dec.More() {
		r.protocolError("a line that is not one JSON object: %q", textclip.Cut(string(b), maxEcho))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.notifyLocked()
	switch {
	case l.Ready != nil:
		if !*l.Ready || r.ready || l.Event != nil {
			r.bad = append(r.bad, fmt.Sprintf("receiver %s: unexpected ready line %q", r.name, textclip.Cut(string(b), maxEcho)))
			return
		}
		r.ready = true
		if l.PID > 0 {
			r.pid = l.PID
		}
	case !r.ready:
		r.bad = append(r.bad, fmt.Sprintf("receiver %s: %q before its ready line", r.name, textclip.Cut(string(b), maxEcho)))
	case l.Event != nil && l.At != nil && l.Status == nil:
		r.at[*l.Event] = append(r.at[*l.Event], *l.At)
	case l.Event != nil && l.Status != nil && l.Body != nil && l.Done != nil && l.At == nil:
		r.answers[*l.Event] = append(r.answers[*l.Event], answer{Status: *l.Status, Body: *l.Body, Done: *l.Done})
	default:
		r.bad = append(r.bad, fmt.Sprintf("receiver %s: a line that is neither a gate nor an answer: %q", r.name, textclip.Cut(string(b), maxEcho)))
	}
}

func (r *receiver) protocolError(format string, args ...any) {
	r.mu.Lock()
	r.bad = append(r.bad, fmt.Sprintf("receiver %s: ", r.name)+fmt.Sprintf(format, args...))
	r.notifyLocked()
	r.mu.Unlock()
}

func (r *receiver) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitFor waits until done (called with r.mu held) holds. It fails when
// the receiver exits first or timeout passes: a bound, never a delay.
func (r *receiver) waitFor(what string, timeout time.Duration, done func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		if done() {
			r.mu.Unlock()
			return nil
		}
		if r.exited {
			err := fmt.Errorf("receiver %s (pid %d) exited (%v) while effectspec waited for %s%s", r.name, r.cmd.Process.Pid, r.exitErr, what, r.stderr.String())
			r.mu.Unlock()
			return err
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("receiver %s (pid %d): no %s within %v%s", r.name, r.cmd.Process.Pid, what, timeout, r.stderr.String())
		case <-r.ctx.Done():
			return fmt.Errorf("receiver %s: interrupted while waiting for %s", r.name, what)
		}
	}
}

// waitGates waits until every event of ids has written a gate line, or
// an answer: a receiver that skipped its gate fails the checks at once
// rather than the wait at its bound.
func (r *receiver) waitGates(ids []string, what string, timeout time.Duration) error {
	return r.waitFor(what, timeout, func() bool {
		for _, id := range ids {
			if len(r.at[id]) == 0 && len(r.answers[id]) == 0 {
				return false
			}
		}
		return true
	})
}

// waitAnswers waits until every event of ids has n answers.
func (r *receiver) waitAnswers(ids []string, n int, what string, timeout time.Duration) error {
	return r.waitFor(what, timeout, func() bool {
		for _, id := range ids {
			if len(r.answers[id]) < n {
				return false
			}
		}
		return true
	})
}

// signal sends sig to the receiver's process group, unless the receiver
// was reaped already (its PID may then belong to someone else).
func (r *receiver) signal(sig syscall.Signal) error {
	r.mu.Lock()
	exited := r.exited
	r.mu.Unlock()
	if exited {
		return fmt.Errorf("receiver %s: exited before %v%s", r.name, sig, r.stderr.String())
	}
	if err := syscall.Kill(-r.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("receiver %s: kill(-%d, %v): %w", r.name, r.cmd.Process.Pid, sig, err)
	}
	return nil
}

// stop pauses the receiver with SIGSTOP and waits until its threads are
// stopped, so that nothing it does afterwards can precede the signal.
func (r *receiver) stop(timeout time.Duration) error {
	if err := r.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	pids := []int{r.cmd.Process.Pid}
	if r.pid != pids[0] {
		pids = append(pids, r.pid)
	}
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for {
			stopped, err := allStopped(pid)
			if err != nil || stopped {
				break // no /proc (not Linux): the signal is all there is
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("receiver %s: pid %d not stopped within %v of SIGSTOP", r.name, pid, timeout)
			}
			time.Sleep(2 * time.Millisecond) // polling a condition, with the bound above
		}
	}
	return nil
}

// allStopped reports whether every thread of pid is stopped (state T), read
// from /proc; an error means it cannot tell.
func allStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, errors.New("no /proc")
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, fmt.Errorf("%s: unexpected %q", t, b)
		}
		if s := b[i+2]; s != 'T' && s != 't' {
			return false, nil
		}
	}
	return true, nil
}

// kill sends SIGKILL and waits, at most timeout, for the process to exit.
func (r *receiver) kill(timeout time.Duration) error {
	r.closeStdin()
	r.mu.Lock()
	exited := r.exited
	r.mu.Unlock()
	if exited {
		return nil
	}
	if err := r.signal(syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return r.waitFor("its exit after SIGKILL", timeout, func() bool { return r.exited })
}

// close closes stdin and waits for the receiver to exit by itself; a
// receiver that does not is killed, and that is an error, as is a non-zero
// exit.
func (r *receiver) close(timeout time.Duration) error {
	r.closeStdin()
	if err := r.waitFor("its exit after its standard input closed", timeout, func() bool { return r.exited }); err != nil {
		r.kill(timeout)
		return err
	}
	if r.exitErr != nil {
		return fmt.Errorf("receiver %s exited with %v after its standard input closed%s", r.name, r.exitErr, r.stderr.String())
	}
	return nil
}

// snapshot returns the gate and answer lines of id, and the protocol errors.
func (r *receiver) snapshot(id string) ([]string, []answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.at[id]...), append([]answer(nil), r.answers[id]...)
}

// protocolErrors returns the lines that broke the protocol.
func (r *receiver) protocolErrors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}

// tail keeps the last lines written to it, for messages, and copies them
// (prefixed) to copy when it is set.
type tail struct {
	mu      sync.Mutex
	max     int
	prefix  string
	copy    io.Writer
	partial []byte
	lines   []string
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		l := string(t.partial[:i])
		t.partial = t.partial[i+1:]
		if t.copy != nil {
			fmt.Fprintln(t.copy, t.prefix+l)
		}
		t.lines = append(t.lines, l)
		if len(t.lines) > t.max {
			t.lines = t.lines[1:]
		}
	}
	return len(p), nil
}

// String is the kept lines as a message's tail ("" when there are none).
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := make([]string, 0, len(t.lines)+1)
	for _, l := range t.lines {
		lines = append(lines, t.prefix+textclip.Cut(l, maxEcho))
	}
	if len(t.partial) > 0 {
		lines = append(lines, t.prefix+textclip.Cut(string(t.partial), maxEcho))
	}
	if len(lines) == 0 {
		return ""
	}
	return "\nlast lines of its standard error:\n" + strings.Join(lines, "\n")
}

// pidString is how receivers write their PID into the ledger.
func pidString(pid int) string { return strconv.Itoa(pid) }
