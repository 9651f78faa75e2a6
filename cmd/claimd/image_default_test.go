package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// imageName is the image the docs run: make image's default IMAGE.
const imageName = "claimd:dev"

// TestImageDefaultCommand runs each `docker run` the docs show, as they
// show it: its arguments after the image name or, when there are none, the
// Dockerfile's ENTRYPOINT and CMD as written. Each runs in the image's
// filesystem as its user (as TestImageRootfsServes) and in a network
// namespace of its own, as in a container: the default command listens
// on fixed ports, which the host's make run or another test may hold. The
// test then calls the ports the docs publish, from inside that namespace.
func TestImageDefaultCommand(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the container's network namespace needs root (as CI runs make test); TestImageRootfsServes covers the filesystem without it")
	}
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	lastStage := string(dockerfile[strings.LastIndex(string(dockerfile), "\nFROM "):])
	entrypoint := instruction(t, lastStage, "ENTRYPOINT")
	defaultArgs := instruction(t, lastStage, "CMD")

	runs := documentedRuns(t, "../../Dockerfile", "../../docs/operating.md", "../../docs/scaling.md")
	if len(runs) == 0 {
		t.Fatalf("no `docker run ... %s` in the Dockerfile, docs/operating.md or docs/scaling.md: the docs must say how to start the image", imageName)
	}
	root := imageRootfs(t)
	for _, run := range runs {
		t.Run(run.line, func(t *testing.T) {
			args := run.args
			if len(args) == 0 {
				args = defaultArgs
			}
			if slices.Contains(args, "--insecure") {
				for _, p := range run.publish {
					if p.hostIP != "127.0.0.1" {
						t.Errorf("%s publishes %s on %q: a command with --insecure must be published on the host's loopback only", run.where, p.containerPort, p.hostIP)
					}
				}
			}

			cmd := exec.Command(entrypoint[0], append(slices.Clone(entrypoint[1:]), args...)...)
			cmd.Dir = "/"
			cmd.Env = []string{}
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Chroot:     root,
				Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID},
				Cloneflags: syscall.CLONE_NEWNET,
				Pdeathsig:  syscall.SIGKILL,
			}
			p := startCmd(t, cmd)
			if uid := processUID(t, cmd.Process.Pid); uid != imageUID {
				t.Fatalf("claimd runs as uid %d, want %d", uid, imageUID)
			}
			grpcPort, httpPort := port(t, p.grpc), port(t, p.http)
			for _, bound := range []string{grpcPort, httpPort} {
				if !slices.ContainsFunc(run.publish, func(p published) bool { return p.containerPort == bound }) {
					t.Errorf("%s does not publish port %s, which claimd listens on (gRPC %s, HTTP %s)", run.where, bound, p.grpc, p.http)
				}
			}
			if slices.Contains(args, "--insecure") {
				p.logs.wait(t, "the warning about --insecure", func(r map[string]any) bool {
					return r["level"] == "WARN" && strings.HasPrefix(fmt.Sprint(r["msg"]), "--insecure")
				})
			}

			ns := enterNetns(t, cmd.Process.Pid)
			conn, err := grpc.NewClient("passthrough:///127.0.0.1:"+grpcPort,
				grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(ns.dial))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			waitServing(t, conn)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := pb.NewClaimServiceClient(conn).Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_image_default"}})
			if err != nil {
				t.Fatalf("Claim() to the image's default command error = %v", err)
			}
			if r.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED && r.GetOutcome() != pb.Outcome_OUTCOME_IN_PROGRESS {
				// IN_PROGRESS: an earlier documented run claimed it in the same /data.
				t.Fatalf("Claim() outcome = %v, want ACQUIRED (or IN_PROGRESS after an earlier run)", r.GetOutcome())
			}
			web := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return ns.dial(ctx, addr)
			}}}
			res, err := web.Get("http://127.0.0.1:" + httpPort + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("GET /healthz on the published HTTP port = %d, want 200", res.StatusCode)
			}
			web.CloseIdleConnections()
			p.stop(t)
			if _, err := os.Stat(filepath.Join(root, "data", "claimd.db")); err != nil {
				t.Fatalf("the embedded tier's database is not in /data: %v", err)
			}
		})
	}
}

// instruction is the exec form (a JSON array) of a Dockerfile instruction.
func instruction(t *testing.T, stage, name string) []string {
	t.Helper()
	for line := range strings.Lines(stage) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var args []string
			if err := json.Unmarshal([]byte(rest), &args); err != nil || len(args) == 0 {
				t.Fatalf("Dockerfile %s %s: want the exec form, a JSON array: %v", name, strings.TrimSpace(rest), err)
			}
			return args
		}
	}
	t.Fatalf("Dockerfile's last stage has no %s", name)
	return nil
}

// documentedRun is one `docker run` line of the docs.
type documentedRun struct {
	line, where string
	publish     []published
	args        []string // after the image name
}

// published is one -p HOST_IP:HOST_PORT:CONTAINER_PORT.
type published struct{ hostIP, containerPort string }

// documentedRuns finds the `docker run ... claimd:dev` lines of files,
// each once. The test knows the options the docs use; another one fails
// it, to be taught here rather than ignored.
func documentedRuns(t *testing.T, files ...string) []documentedRun {
	t.Helper()
	var runs []documentedRun
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			_, cmdline, ok := strings.Cut(line, "docker run ")
			if !ok {
				continue
			}
			if end := strings.IndexByte(cmdline, '`'); end >= 0 { // inline code ends the command
				cmdline = cmdline[:end]
			}
			cmdline = strings.TrimSpace(cmdline)
			run := documentedRun{line: "docker run " + cmdline, where: fmt.Sprintf("%s:%d", filepath.Base(file), i+1)}
			if !strings.Contains(cmdline, imageName) {
				t.Fatalf("%s: %q: want the whole command on one line, with the image %s", run.where, run.line, imageName)
			}
			fields := strings.Fields(cmdline)
		options:
			for j := 0; j < len(fields); j++ {
				switch f := fields[j]; {
				case f == "--rm":
				case f == "-p" && j+1 < len(fields):
					j++
					parts := strings.Split(fields[j], ":")
					if len(parts) != 3 {
						t.Fatalf("%s: -p %s: want HOST_IP:HOST_PORT:CONTAINER_PORT (publish on an address you chose)", run.where, fields[j])
					}
					run.publish = append(run.publish, published{hostIP: parts[0], containerPort: parts[2]})
				case f == imageName:
					run.args = fields[j+1:]
					break options
				default:
					t.Fatalf("%s: %q: this test does not know docker run's %s; teach it", run.where, run.line, f)
				}
			}
			if !slices.ContainsFunc(runs, func(r documentedRun) bool { return r.line == run.line }) {
				runs = append(runs, run)
			}
		}
	}
	return runs
}

// port is the port of a host:port.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// netnsDialer dials from inside another process's network namespace. One
// OS thread, locked and moved there, makes every socket: a socket stays
// in the namespace it was made in, wherever it is used afterwards.
type netnsDialer struct {
	calls chan func()
	done  chan struct{}
}

// enterNetns moves a thread into the network namespace of pid and brings
// that namespace's loopback up (a new namespace starts with it down).
func enterNetns(t *testing.T, pid int) *netnsDialer {
	t.Helper()
	d := &netnsDialer{calls: make(chan func()), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns, its thread ends
		// with it rather than run other goroutines in that namespace.
		runtime.LockOSThread()
		ready <- joinNetns(pid)
		for {
			select {
			case f := <-d.calls:
				f()
			case <-d.done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(d.done) })
	if err := <-ready; err != nil {
		t.Fatalf("entering the network namespace of pid %d: %v", pid, err)
	}
	return d
}

// joinNetns moves the calling thread into pid's network namespace and
// sets its loopback up.
func joinNetns(pid int) error {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo up: %w", err)
	}
	return nil
}

// dial opens a TCP connection to addr from inside the namespace.
func (d *netnsDialer) dial(ctx context.Context, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	out := make(chan result, 1)
	call := func() {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		out <- result{c, err}
	}
	select {
	case d.calls <- call:
	case <-d.done:
		return nil, errors.New("the namespace's dialer has stopped")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := <-out
	return r.c, r.err
}
