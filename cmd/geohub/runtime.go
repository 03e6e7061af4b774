package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// tuneRuntime fits the Go scheduler and garbage collector to a server whose
// every write waits on one goroutine's fsync, and returns a function that
// puts the previous settings back. An operator's GOMAXPROCS, GOGC or
// GOMEMLIMIT always wins. The benchmarks run every arm, raw baselines
// included, under it: they compare the server with the machine, not with a
// differently tuned runtime.
func tuneRuntime() (restore func()) {
	var undo []func()
	if os.Getenv("GOMAXPROCS") == "" {
		// The single writer spends most of each commit blocked in fsync
		// (0.4–0.9 ms here), and the runtime lets a goroutine in a syscall
		// that short keep its P: on two cores a trace showed the writer's
		// P held idle about a quarter of the time while requests queued
		// for CPU. One P more lets them run meanwhile.
		prev := runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
		undo = append(undo, func() { runtime.GOMAXPROCS(prev) })
	}
	if os.Getenv("GOGC") == "" {
		// The live heap is small (tens of MB) and every request allocates:
		// at the default GOGC=100 the collector took about 8% of the CPU
		// under publish load, at 400 about 1%. The memory limit brings
		// frequent collection back before the heap grows past it.
		prev := debug.SetGCPercent(400)
		undo = append(undo, func() { debug.SetGCPercent(prev) })
		if os.Getenv("GOMEMLIMIT") == "" {
			prev := debug.SetMemoryLimit(memoryLimit(512<<20, "/sys/fs/cgroup/memory.max"))
			undo = append(undo, func() { debug.SetMemoryLimit(prev) })
		}
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// memoryLimit is the soft limit for the heap: def, or three quarters of the
// cgroup v2 memory limit in file when that is lower, so that in a small
// container the collector speeds up well before the kernel kills.
func memoryLimit(def int64, file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64) // "max" means none
	if err != nil || n <= 0 {
		return def
	}
	return min(def, n/4*3)
}
