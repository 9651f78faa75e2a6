package main

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is everything one run of benchrun measured.
type Report struct {
	Started   time.Time     `json:"started"`
	Finished  time.Time     `json:"finished"`
	Machine   Machine       `json:"machine"`
	Versions  []NameValue   `json:"versions"`
	Options   ReportOptions `json:"options"`
	Baselines []Result      `json:"baselines"`
	Runs      []Result      `json:"runs"`
	// Scaling are the lifecycle runs on 1, 2, 4… claimd replicas.
	Scaling []Result `json:"scaling,omitempty"`
	// Python are the Python baseline's runs: claimd's guard and
	// Powertools' idempotency on Redis, first deliveries and duplicates.
	Python []Result `json:"python,omitempty"`
	// Low are the low-concurrency runs: Claim(start) → SETTLED from
	// lowCallers callers, with what Redis and PostgreSQL did.
	Low []Result `json:"low,omitempty"`
	// OpenLoop are the lifecycle runs at a fixed arrival rate.
	OpenLoop []Result `json:"open_loop,omitempty"`
	// Growth are the new-key runs at growing numbers of stored claims,
	// PartitionDrop the drop of a month's audit partition under load.
	Growth        []Growth       `json:"growth,omitempty"`
	PartitionDrop *PartitionDrop `json:"partition_drop,omitempty"`
	// Profiles say where claimd's CPU went in some scenarios (profile.go).
	Profiles []Profile `json:"profiles,omitempty"`
}

// Machine describes the machine the figures belong to.
type Machine struct {
	CPUs       int     `json:"cpus"`
	CPU        string  `json:"cpu"`
	MemoryGiB  float64 `json:"memory_gib"`
	Kernel     string  `json:"kernel"`
	LoadBefore string  `json:"load_before"`
	LoadAfter  string  `json:"load_after"`
}

// NameValue is one version line.
type NameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ReportOptions are the settings of the run that the report quotes.
type ReportOptions struct {
	Duration   string   `json:"duration"`
	Callers    int      `json:"callers"`
	Contend    int      `json:"contend_callers"`
	DupKeys    int      `json:"dup_keys"`
	Targets    []string `json:"targets"`
	Clients    []string `json:"clients"`
	Scenarios  []string `json:"scenarios"`
	Command    string   `json:"command"`
	ClaimdArgs string   `json:"claimd_args"`
	Cores      int      `json:"cores,omitempty"`
	Replicas   []int    `json:"replicas,omitempty"`
	PyThreads  int      `json:"python_threads,omitempty"`
}

func reportOptions(o options) ReportOptions {
	return ReportOptions{
		Duration: o.duration.String(), Callers: o.callers, Contend: o.contend, DupKeys: o.dupKeys,
		Targets: o.targets, Clients: o.clients, Scenarios: o.scenarios, Command: o.command,
		ClaimdArgs: strings.Join(claimdArgs("ADDR", "HTTP_ADDR", "AUTH_FILE"), " "),
		Cores:      o.cores, Replicas: o.replicas, PyThreads: o.pyThreads,
	}
}

func machineInfo() Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadBefore: loadAvg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				m.MemoryGiB = kb / (1 << 20)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// versions reports the versions of everything measured: the Go toolchain
// and modules claimd was built with, the servers and the tools.
func (b *bench) versions() []NameValue {
	v := []NameValue{{"Go", runtime.Version()}}
	if bi, err := buildinfo.ReadFile(b.bin("claimd")); err == nil {
		for _, d := range bi.Deps {
			switch d.Path {
			case "google.golang.org/grpc", "github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9", "modernc.org/sqlite":
				v = append(v, NameValue{d.Path, d.Version})
			}
		}
	}
	v = append(v, NameValue{"Redis", firstLine(b.cmdOut("redis-server", "--version"))})
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, b.pgURL("postgres")); err == nil {
		var s string
		if conn.QueryRow(ctx, "SELECT version()").Scan(&s) == nil {
			v = append(v, NameValue{"PostgreSQL", s})
		}
		conn.Close(ctx)
	}
	v = append(v,
		NameValue{"ghz", modVersion(b.opts.ghz)},
		NameValue{"redis-benchmark", firstLine(b.cmdOut("redis-benchmark", "--version"))},
		NameValue{"pgbench", firstLine(b.cmdOut("pgbench", "--version"))},
	)
	return v
}

// modVersion is the module version a Go binary was built from (go install
// leaves ghz --version at "dev").
func modVersion(path string) string {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return bi.Main.Path + " " + bi.Main.Version
}

func (b *bench) cmdOut(name string, args ...string) string {
	out, err := exec.CommandContext(b.ctx, name, args...).CombinedOutput()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return string(out)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func (b *bench) writeJSON(path string) error {
	data, err := json.MarshalIndent(&b.report, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
