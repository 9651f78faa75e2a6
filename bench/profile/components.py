#!/usr/bin/env python3
"""Attribute the CPU samples of `perf script` (a Go process recorded with
`perf record -g`) to the components that spent them: claimd's own code, the
libraries it calls (gRPC, go-redis, pgx, protobuf, the Prometheus
middleware, crypto) and the Go runtime's own work (GC, the scheduler,
sysmon, stack growth). A library's allocations and system calls are counted
to it, as "(alloc)" and "(syscall)"; the GC they cause later is counted to
the runtime.

    perf script -i perf.data | components.py [--per-op US]

--per-op is the process's CPU per operation (µs) from the benchmark, to
print each component's share in µs as well as in per cent.
"""
import argparse
import collections
import sys

LIBRARIES = [  # (prefix or substring, component), first match wins
    ("github.com/claimd/claimd/gen/", "protobuf"),
    ("github.com/claimd/claimd/", "claimd"),
    ("google.golang.org/grpc", "grpc"),
    ("golang.org/x/net/http2", "grpc"),
    ("go-grpc-middleware", "metrics"),
    ("prometheus", "metrics"),
    ("google.golang.org/protobuf", "protobuf"),
    ("redis/go-redis", "go-redis"),
    ("jackc/", "pgx"),
    ("crypto/", "crypto"),
]
GC = ("runtime.gcBgMarkWorker",)
ASSIST = ("runtime.gcAssistAlloc", "runtime.gcAssistAlloc1", "runtime.deductAssistCredit")
STACK = ("runtime.newstack", "runtime.morestack.abi0", "runtime.morestack")
SCHED = ("runtime.mcall", "runtime.park_m", "runtime.schedule", "runtime.findRunnable", "runtime.goexit0")
ALLOC = ("runtime.mallocgc", "runtime.newobject", "runtime.growslice", "runtime.makeslice", "runtime.makemap")
SYSCALL = ("syscall.", "internal/runtime/syscall", "entry_SYSCALL")


def library(frame):
    for key, comp in LIBRARIES:
        if key in frame:
            return comp
    return None


def classify(frames):
    """frames: innermost first."""
    if any(f.startswith(GC) for f in frames):
        return "Go runtime: GC (background)"
    if any(f.startswith("runtime.sysmon") for f in frames):
        return "Go runtime: sysmon"
    if any(f in ASSIST for f in frames):
        return "Go runtime: GC (assist)"
    if any(f in STACK for f in frames):
        return "Go runtime: stack growth"
    for i, f in enumerate(frames):
        comp = library(f)
        if comp:
            below = frames[:i]
            if any(b.startswith(ALLOC) for b in below):
                return comp + " (alloc)"
            if any(b.startswith(SYSCALL) for b in below):
                return comp + " (syscall)"
            return comp
    if any(f in SCHED for f in frames):
        return "Go runtime: scheduler"
    return "Go runtime and kernel: other"


def samples(lines):
    """Yields the frames of each sample, innermost first."""
    frames = []
    for line in lines:
        line = line.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        parts = line.split(None, 1)
        if len(parts) == 2 and all(c in "0123456789abcdef" for c in parts[0]):
            frames.append(parts[1].rsplit("+", 1)[0].split(" (")[0])
    if frames:
        yield frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-op", type=float, default=0, help="the process's CPU µs per operation")
    args = ap.parse_args()
    counts = collections.Counter(classify(f) for f in samples(sys.stdin))
    total = sum(counts.values())
    if total == 0:
        sys.exit("components.py: no samples with call stacks on stdin (perf record -g?)")
    print("| component | share | µs/op |" if args.per_op else "| component | share |")
    print("| --- | ---: | ---: |" if args.per_op else "| --- | ---: |")
    for comp, n in counts.most_common():
        share = n / total
        row = f"| {comp} | {share * 100:.1f} % |"
        if args.per_op:
            row += f" {share * args.per_op:.1f} |"
        print(row)
    print(f"\n{total} samples")


if __name__ == "__main__":
    main()
