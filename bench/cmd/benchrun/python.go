package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// The Python baseline: one webhook handler behind claimd's Python guard
// and behind AWS Lambda Powertools' idempotency utility on Redis, driven
// by bench/python/guard_vs_powertools.py from N threads, first deliveries
// and duplicates, in the same run on the same Redis (Powertools keeps its
// records only there, so its runs have Redis fsync every write, as
// PostgreSQL does claimd's; claimd's guard goes to claimd on Redis +
// PostgreSQL).
const (
	pyClaimd     = "claimd"
	pyPowertools = "powertools"
	pyFirst      = "first"
	pyDup        = "dup"
	targetPython = "claimd-python" // the claimd the guard calls
)

// runPython measures both layers. claimd runs throughout; its CPU is
// metered in both layers' runs (idle in Powertools').
func (b *bench) runPython() error {
	return b.with(targetPython, "python", b.measurePython)
}

// measurePython runs both layers, first deliveries then duplicates,
// against t.
func (b *bench) measurePython(t *target) error {
	for _, mode := range []string{pyFirst, pyDup} {
		for _, impl := range []string{pyPowertools, pyClaimd} {
			if err := b.redisAppendFsync(impl == pyPowertools); err != nil {
				return fmt.Errorf("python %s %s: %w", impl, mode, err)
			}
			res, err := b.python(t, impl, mode)
			if err != nil {
				return fmt.Errorf("python %s %s: %w", impl, mode, err)
			}
			logf("python %-10s %-5s %8.0f events/s  p50 %6.2fms  p99 %6.2fms  errors %d  cpu %s",
				impl, mode, res.Rate, res.P50, res.P99, res.Errors, fmtCPU(res.CPU))
			b.report.Python = append(b.report.Python, res)
		}
	}
	return nil
}

// python runs the script once for impl and mode.
func (b *bench) python(t *target, impl, mode string) (Result, error) {
	prefix := fmt.Sprintf("py-%s-%s", impl, strconv.FormatInt(time.Now().UnixNano(), 36))
	script := func(mode string) *exec.Cmd {
		cmd := exec.CommandContext(b.ctx, b.opts.python, b.opts.pyScript,
			"--impl", impl, "--mode", mode, "--threads", strconv.Itoa(b.opts.pyThreads),
			"--duration", b.opts.duration.String(), "--prefix", prefix,
			"--claimd", "http://"+t.httpAddr, "--token-file", b.tokenFile, "--redis-url", b.redisURL(3))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+b.opts.pySrc)
		return cmd
	}
	if mode == pyDup {
		// The dup events' first deliveries, outside the measurement.
		if out, err := script("settle").CombinedOutput(); err != nil {
			return Result{}, fmt.Errorf("settle: %w\n%s", err, tail(string(out), 2000))
		}
	}
	cmd := script(mode)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cpu, busy, err := measure(t.meters, func() error {
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%w\n%s", err, tail(stderr.String(), 2000))
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	var s struct {
		claimloadSummary
		CPU float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		return Result{}, fmt.Errorf("summary: %w\n%s", err, stdout.String())
	}
	if s.Errors > 0 {
		logf("python %s %s: %d errors; first lines of its stderr:\n%s", impl, mode, s.Errors, tail(stderr.String(), 1000))
	}
	res := Result{
		Target: impl, Scenario: mode, Client: "python", Callers: b.opts.pyThreads, Unit: "events/s",
		Seconds: s.Seconds, Requests: s.Requests, Errors: s.Errors, ErrorCodes: s.ErrorCodes,
		Rate: s.RPS, P50: s.P50, P99: s.P99, CPU: cpu, MachineBusy: busy,
	}
	// The script's own CPU over its measured loop, without the
	// interpreter's start and imports.
	res.CPU["client"] = s.CPU
	return res, nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
