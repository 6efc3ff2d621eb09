package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procStat returns a process's process group and CPU time (user + system) from
// /proc/<pid>/stat.
func procStat(path string) (pgrp int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	// after the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12), in clock ticks (100 Hz)
	if len(f) < 13 {
		return 0, 0, false
	}
	pgrp, _ = strconv.Atoi(f[2])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return pgrp, time.Duration(u+st) * 10 * time.Millisecond, true
}

// groupCPU sums the CPU time of the live processes of each process group (the harness runs each
// server in a group of its own, led by the server's process).
func groupCPU(groups map[string]int) map[string]time.Duration {
	out := make(map[string]time.Duration, len(groups))
	byPgrp := map[int]string{}
	for name, g := range groups {
		if g > 0 {
			byPgrp[g] = name
		}
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		pgrp, cpu, ok := procStat(p)
		if !ok {
			continue
		}
		if name, ok := byPgrp[pgrp]; ok {
			out[name] += cpu
		}
	}
	return out
}

// machineCPU returns the machine's busy and total CPU time so far (/proc/stat, all cores).
func machineCPU() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	var sum, idle int64
	for i, x := range f[1:] {
		v, _ := strconv.ParseInt(x, 10, 64)
		sum += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return time.Duration(sum-idle) * 10 * time.Millisecond, time.Duration(sum) * 10 * time.Millisecond
}

// cpuShares is the CPU used by sluice, each server and the whole machine over an interval.
type cpuShares struct {
	groups      map[string]int
	start       map[string]time.Duration
	busy0, tot0 time.Duration
}

func (b *bench) startCPU(sluicePgrp int) *cpuShares {
	c := &cpuShares{groups: map[string]int{"sluice": sluicePgrp}}
	if b.es != nil {
		c.groups["elasticsearch"] = b.es.PID()
	}
	if b.my != nil {
		c.groups["mariadb"] = b.my.PID()
	}
	if b.pg != nil {
		c.groups["postgres"] = b.pg.PID()
	}
	if b.rds != nil {
		c.groups["redis"] = b.rds.PID()
	}
	c.start = groupCPU(c.groups)
	c.busy0, c.tot0 = machineCPU()
	return c
}

// stop returns each group's CPU seconds since start, the CPU seconds of every other process on
// the machine (key "other processes"; the machine is shared) and the machine's busy fraction.
func (c *cpuShares) stop() (map[string]float64, float64) {
	end := groupCPU(c.groups)
	out := map[string]float64{}
	var ours float64
	for name := range c.groups {
		out[name] = (end[name] - c.start[name]).Seconds()
		ours += out[name]
	}
	busy, tot := machineCPU()
	frac := 0.0
	if tot > c.tot0 {
		frac = float64(busy-c.busy0) / float64(tot-c.tot0)
		out["other processes"] = max((busy-c.busy0).Seconds()-ours, 0)
	}
	return out, frac
}
