package sinks

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape reads /metrics: the value of each sample by its name and labels as printed.
func scrape(port int) (map[string]float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// checkSinkMetrics waits until both sinks have written everything (no consumer lag) and checks
// that their own statistics (each sink's Stats) are served by /metrics and account for every
// record the runtime handed them: each one written, deleted, refused by the version guard,
// skipped or rejected.
func checkSinkMetrics(t *testing.T, port int, logPath string) {
	t.Helper()
	sinks := map[string][]string{
		"search": {"indexed", "deleted", "version_conflicts_skipped", "skipped", "rejected"},
		"cache":  {"written", "deleted", "version_conflicts_skipped", "skipped", "rejected"},
	}
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := scrape(port)
		if err != nil {
			t.Fatal(err)
		}
		var problems []string
		for name, parts := range sinks {
			label := `{connector="` + name + `"}`
			lag, lagSeen := 0.0, false
			for k, v := range m {
				if strings.HasPrefix(k, `sluice_sink_consumer_lag{connector="`+name+`"`) {
					lag += v
					lagSeen = true
				}
			}
			total, ok := m["sluice_sink_records_written_total"+label]
			if !lagSeen || !ok || lag > 0 || total == 0 {
				problems = append(problems, fmt.Sprintf("%s: lag %v (seen %v), %v records written", name, lag, lagSeen, total))
				continue
			}
			sum := 0.0
			for _, p := range parts {
				v, ok := m["sluice_sink_"+p+label]
				if !ok {
					problems = append(problems, fmt.Sprintf("%s: no sluice_sink_%s", name, p))
				}
				sum += v
			}
			for _, p := range []string{"retries", "batches", "batch_time_seconds", "last_batch_time_seconds", "partial_missing"} {
				if _, ok := m["sluice_sink_"+p+label]; !ok {
					problems = append(problems, fmt.Sprintf("%s: no sluice_sink_%s", name, p))
				}
			}
			if name == "cache" {
				if _, ok := m["sluice_sink_markers_read"+label]; !ok {
					problems = append(problems, "cache: no sluice_sink_markers_read")
				}
			}
			if sum != total {
				problems = append(problems, fmt.Sprintf("%s: its statistics account for %v records, the runtime wrote %v", name, sum, total))
			}
			if m["sluice_sink_batches"+label] == 0 || m["sluice_sink_deleted"+label] == 0 {
				problems = append(problems, fmt.Sprintf("%s: no batch or no delete counted", name))
			}
		}
		if len(problems) == 0 {
			for name, parts := range sinks {
				label := `{connector="` + name + `"}`
				var b strings.Builder
				for _, p := range append(parts, "records_written_total") {
					fmt.Fprintf(&b, " %s=%v", p, m["sluice_sink_"+p+label])
				}
				t.Logf("%s:%s", name, b.String())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink statistics in /metrics:\n%s\n%s", strings.Join(problems, "\n"), tail(logPath))
		}
		time.Sleep(300 * time.Millisecond)
	}
}
