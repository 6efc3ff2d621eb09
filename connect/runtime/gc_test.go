package runtime_test

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/sluice-cdc/sluice/connect/runtime"
)

// SetGCDefaults sets GOGC=300 unless the environment sets GOGC, which then wins.
func TestSetGCDefaults(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	t.Setenv("GOGC", "150") // restored after the test
	if pct, env := runtime.SetGCDefaults(); pct != 150 || !env {
		t.Fatalf("with GOGC=150: got %d, from env %v", pct, env)
	}
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Fatalf("with GOGC set, the target changed to %d", cur)
	}
	os.Unsetenv("GOGC")
	if pct, env := runtime.SetGCDefaults(); pct != runtime.GCPercent || env {
		t.Fatalf("without GOGC: got %d, from env %v", pct, env)
	}
	if cur := debug.SetGCPercent(100); cur != runtime.GCPercent {
		t.Fatalf("without GOGC, the target is %d, want %d", cur, runtime.GCPercent)
	}
}
