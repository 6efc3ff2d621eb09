package runtime

import (
	"os"
	"runtime/debug"
	"strconv"
)

// GCPercent is the garbage collector's target (GOGC) that sluice runs with unless the GOGC
// environment variable sets one. A pipeline allocates fast (every record is built, encoded,
// fetched and decoded) and keeps little alive (a few batches), so Go's default of 100 collects
// very often: at 300 the heap may grow to four times its live size between collections, for
// about a third less CPU in the collector and the allocator.
const GCPercent = 300

// SetGCDefaults sets the collector's target to GCPercent unless GOGC is set in the
// environment, and returns the target in effect and whether it came from GOGC. `sluice run`
// calls it at start; benchmarks that stand for `sluice run` call it too.
func SetGCDefaults() (percent int, fromEnv bool) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		if v == "off" {
			return -1, true
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 100, true // Go's reading of an empty or malformed GOGC
		}
		return n, true
	}
	debug.SetGCPercent(GCPercent)
	return GCPercent, false
}
