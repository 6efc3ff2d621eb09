package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The sluice binary serves no pprof endpoint, so the bench builds a second binary from the same
// sources plus one file, added through `go build -overlay` (the repository is not touched): when
// SLUICE_BENCH_CPUPROFILE names a file, the process profiles its CPU from start until it gets
// SIGUSR1, then writes the profile and a "<file>.done" marker.
const profileOverlay = `package main

import (
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func init() {
	path := os.Getenv("SLUICE_BENCH_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		return
	}
	if pprof.StartCPUProfile(f) != nil {
		f.Close()
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	go func() {
		<-c
		pprof.StopCPUProfile()
		f.Close()
		os.WriteFile(path+".done", nil, 0o644)
	}()
}
`

// buildProfiled builds the profiling sluice into dir.
func buildProfiled(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Dir}}", "github.com/sluice-cdc/sluice/cmd/sluice").Output()
	if err != nil {
		return "", fmt.Errorf("go list: %w", err)
	}
	pkgDir := strings.TrimSpace(string(out))
	src := filepath.Join(dir, "benchprofile.go")
	if err := os.WriteFile(src, []byte(profileOverlay), 0o644); err != nil {
		return "", err
	}
	ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkgDir, "zz_benchprofile.go"): src}})
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice-profiled")
	if out, err := exec.CommandContext(ctx, "go", "build", "-overlay", ovPath, "-o", bin, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -overlay: %v: %s", err, out)
	}
	return bin, nil
}

// stopProfile asks a profiled node to write its profile and waits for it.
func stopProfile(n *node, path string) error {
	if err := n.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path + ".done"); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no profile written to %s", path)
}

// summarizeProfile renders the profile's top functions by flat and by cumulative time.
func summarizeProfile(ctx context.Context, bin, path string) (flat, cum string, err error) {
	run := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go tool pprof: %v: %s", err, out)
		}
		return string(out), nil
	}
	if flat, err = run("-top", "-nodecount=25", bin, path); err != nil {
		return "", "", err
	}
	if cum, err = run("-top", "-cum", "-nodecount=40", bin, path); err != nil {
		return "", "", err
	}
	return flat, cum, nil
}
