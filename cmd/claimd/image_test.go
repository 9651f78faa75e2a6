package main

import (
	"bufio"
	"context"
	"debug/elf"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// imageUID is the user the image runs as (Dockerfile USER, rootfs.sh).
const imageUID = 65532

// TestImageRootfsServes builds the image's filesystem with the script the
// Dockerfile runs, and starts claimd in it alone: chrooted into that tree,
// as uid 65532, with an empty environment. It must serve and decide a claim
// with nothing from the host but the kernel and the loopback network. No
// container runtime is needed (or present on the machines this runs on);
// the chroot is the image's last stage without the packaging.
func TestImageRootfsServes(t *testing.T) {
	t.Parallel()
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	lastStage := string(dockerfile[strings.LastIndex(string(dockerfile), "\nFROM "):])
	for _, want := range []string{"\nFROM scratch\n", "\nUSER 65532:65532\n", "\nENTRYPOINT [\"/claimd\"]\n",
		"\nCOPY --from=build /rootfs /\n", "\nCOPY --from=build --chown=65532:65532 /data /data\n"} {
		if !strings.Contains(lastStage, want) {
			t.Fatalf("Dockerfile's last stage has no %q:\n%s", strings.TrimSpace(want), lastStage)
		}
	}
	if !strings.Contains(string(dockerfile), "./scripts/rootfs.sh /rootfs") {
		t.Fatal("Dockerfile does not build its filesystem with scripts/rootfs.sh, which this test runs")
	}

	root := imageRootfs(t)

	// Nothing but claimd's own files.
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	want := []string{"claimd", "etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt"}
	if !slices.Equal(files, want) {
		t.Fatalf("rootfs files = %v, want exactly %v", files, want)
	}

	// Static: no program interpreter (dynamic loader), no shared library.
	bin, err := elf.Open(filepath.Join(root, "claimd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("claimd has a PT_INTERP header: it is dynamically linked (CGO_ENABLED=0 missing?)")
		}
	}
	if libs, _ := bin.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("claimd needs shared libraries %v", libs)
	}
	bin.Close()

	// With a timer slack, which the embedded tiers do not set by default:
	// claimd must apply it without /proc (timerslack_linux.go).
	cmd := exec.Command("/claimd", "serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--data-dir", "/data", "--log-format", "json", "--timer-slack", "1ms")
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = chrootAs(t, root)
	p := startCmd(t, cmd)

	if uid := processUID(t, cmd.Process.Pid); uid != imageUID {
		t.Fatalf("claimd runs as uid %d, want %d", uid, imageUID)
	}
	// No /proc in the chroot: claimd applies its timer slack by executing
	// the path it was started by (it has logged "claimd serving" by now).
	checkTimerSlack(t, p, time.Millisecond)
	conn := p.conn(t)
	waitServing(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := pb.NewClaimServiceClient(conn).Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_image"}})
	if err != nil {
		t.Fatalf("Claim() in the image's rootfs error = %v", err)
	}
	if r.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim() outcome = %v, want ACQUIRED", r.GetOutcome())
	}
	p.stop(t)
	if _, err := os.Stat(filepath.Join(root, "data", "claimd.db")); err != nil {
		t.Fatalf("the embedded tier's database is not in /data: %v", err)
	}
}

// imageRootfs lays out the image's filesystem with the script the
// Dockerfile runs, and /data as the Dockerfile makes it.
func imageRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil { // the unprivileged user must reach it
		t.Fatal(err)
	}
	script := exec.Command("../../scripts/rootfs.sh", root)
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("rootfs.sh: %v\n%s", err, out)
	}

	// /data as the Dockerfile makes it: the image's user owns it.
	data := filepath.Join(root, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(data, imageUID, imageUID); err != nil {
			t.Fatal(err)
		}
	}

	return root
}

// chrootAs runs a command chrooted into root as imageUID: directly when the
// test runs as root (as CI does), else in a new user namespace that maps
// imageUID to the caller.
func chrootAs(t *testing.T, root string) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Chroot: root, Pdeathsig: syscall.SIGKILL}
	if os.Getuid() == 0 {
		a.Credential = &syscall.Credential{Uid: imageUID, Gid: imageUID}
		return a
	}
	a.Cloneflags = syscall.CLONE_NEWUSER
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: imageUID, HostID: os.Getuid(), Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: imageUID, HostID: os.Getgid(), Size: 1}}
	return a
}

// processUID reads the real uid of pid from /proc.
func processUID(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "Uid:"); ok {
			uid, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}
