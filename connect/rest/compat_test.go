package rest_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// step is one request of the compatibility suite and what Kafka Connect's documentation says
// its answer is.
type step struct {
	name               string
	before             func(e *env)
	method, path, body string
	status             int
	check              func(t *testing.T, r response)
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not an object", v)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func wantKeys(t *testing.T, v any, keys ...string) {
	t.Helper()
	sortStrings(keys)
	if diff := cmp.Diff(keys, keysOf(t, v)); diff != "" {
		t.Fatalf("keys (-want +got):\n%s\nin %v", diff, v)
	}
}

func wantError(t *testing.T, r response, status int, contains string) {
	t.Helper()
	m := r.obj(t)
	wantKeys(t, m, "error_code", "message")
	if int(m["error_code"].(float64)) != status {
		t.Fatalf("error_code %v, want %d", m["error_code"], status)
	}
	if msg := m["message"].(string); !strings.Contains(msg, contains) {
		t.Fatalf("message %q does not contain %q", msg, contains)
	}
	if strings.Contains(string(r.body), ".go:") || strings.Contains(string(r.body), "goroutine ") {
		t.Fatalf("the answer carries a stack trace: %s", r.body)
	}
}

func status(t *testing.T, r response) (connector string, tasks []string) {
	t.Helper()
	m := r.obj(t)
	wantKeys(t, m, "name", "connector", "tasks", "type")
	wantKeys(t, m["connector"], "state", "worker_id")
	for _, task := range m["tasks"].([]any) {
		tm := task.(map[string]any)
		if _, ok := tm["trace"]; ok {
			wantKeys(t, tm, "id", "state", "worker_id", "trace")
		} else {
			wantKeys(t, tm, "id", "state", "worker_id")
		}
		tasks = append(tasks, tm["state"].(string))
	}
	return m["connector"].(map[string]any)["state"].(string), tasks
}

// TestKafkaConnectCompatibility runs requests written from Kafka Connect's documented REST
// behaviour (paths, status codes, JSON shapes, restart semantics, the offsets rules) against
// sluice.
func TestKafkaConnectCompatibility(t *testing.T) {
	e := newEnv(t, envOptions{})
	waitRunning := func(name string) func(e *env) { return func(e *env) { e.waitTask(name, "RUNNING") } }
	// Restarts of gen are counted by the runtime's "connector restarted" log line.
	restarted := func() int {
		n := 0
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, `msg="connector restarted"`) && strings.Contains(l, "connector=gen") {
				n++
			}
		}
		return n
	}
	mark := 0
	markRestarts := func(*env) { mark = restarted() }
	restartsSinceMark := func() int { return restarted() - mark }
	steps := []step{
		{name: "root: version, commit, cluster id", method: "GET", path: "/", status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "version", "commit", "kafka_cluster_id")
			if m["version"] != "9.9.9" {
				t.Fatalf("version %v", m["version"])
			}
		}},
		{name: "list connectors: empty array", method: "GET", path: "/connectors", status: 200, check: func(t *testing.T, r response) {
			if string(r.body) != "[]\n" {
				t.Fatalf("got %s", r.body)
			}
		}},
		{name: "create: 201 with name, config, tasks, type and Location", method: "POST", path: "/connectors", body: datagenJSON("gen", ""), status: 201, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "name", "config", "tasks", "type")
			if m["name"] != "gen" || m["type"] != "source" {
				t.Fatalf("got %v", m)
			}
			cfg := m["config"].(map[string]any)
			if cfg["name"] != "gen" || cfg["connector.class"] != "datagen" {
				t.Fatalf("config %v lacks name or connector.class", cfg)
			}
			if r.header.Get("Location") != "/connectors/gen" {
				t.Fatalf("Location %q", r.header.Get("Location"))
			}
		}},
		{name: "create again: 409", method: "POST", path: "/connectors", body: datagenJSON("gen", ""), status: 409, check: func(t *testing.T, r response) {
			wantError(t, r, 409, "gen")
		}},
		{name: "create without name: 400", method: "POST", path: "/connectors", body: `{"config":{"connector.class":"datagen"}}`, status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, "name is required")
		}},
		{name: "create with an invalid config: 400 naming the key", method: "POST", path: "/connectors", body: `{"name":"bad","config":{"connector.class":"datagen","datagen.keys":"0"}}`, status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, "datagen.keys: must be 1..")
			if !strings.HasPrefix(r.obj(t)["message"].(string), "Connector configuration is invalid and contains the following 1 error(s):") {
				t.Fatalf("message %q", r.obj(t)["message"])
			}
		}},
		{name: "create with config.name different from name: 400", method: "POST", path: "/connectors", body: `{"name":"a","config":{"name":"b","connector.class":"datagen"}}`, status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, "config.name (b) does not match the connector's name (a)")
		}},
		{name: "create with initial_state STOPPED", method: "POST", path: "/connectors", body: strings.Replace(datagenJSON("stopped", ""), `{"name"`, `{"initial_state":"STOPPED","name"`, 1), status: 201},
		{name: "a connector created STOPPED has no tasks", method: "GET", path: "/connectors/stopped/status", status: 200, check: func(t *testing.T, r response) {
			if c, tasks := status(t, r); c != "STOPPED" || len(tasks) != 0 {
				t.Fatalf("connector %s tasks %v", c, tasks)
			}
		}},
		{name: "create with initial_state PAUSED", method: "POST", path: "/connectors", body: strings.Replace(datagenJSON("paused", ""), `{"name"`, `{"initial_state":"PAUSED","name"`, 1), status: 201},
		{name: "a connector created PAUSED reports PAUSED", before: func(e *env) { time.Sleep(50 * time.Millisecond) }, method: "GET", path: "/connectors/paused/status", status: 200, check: func(t *testing.T, r response) {
			if c, _ := status(t, r); c != "PAUSED" {
				t.Fatalf("connector %s", c)
			}
		}},
		{name: "create with a bad initial_state: 400", method: "POST", path: "/connectors", body: strings.Replace(datagenJSON("x", ""), `{"name"`, `{"initial_state":"SLEEPING","name"`, 1), status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, `initial_state must be RUNNING, PAUSED or STOPPED (got "SLEEPING")`)
		}},
		{name: "get connector", before: waitRunning("gen"), method: "GET", path: "/connectors/gen", status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "name", "config", "tasks", "type")
			if diff := cmp.Diff([]any{map[string]any{"connector": "gen", "task": 0.0}}, m["tasks"]); diff != "" {
				t.Fatalf("tasks (-want +got):\n%s", diff)
			}
		}},
		{name: "get unknown connector: 404", method: "GET", path: "/connectors/nope", status: 404, check: func(t *testing.T, r response) {
			wantError(t, r, 404, "connector nope not found")
		}},
		{name: "get config", method: "GET", path: "/connectors/gen/config", status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			if m["datagen.keys"] != "20" || m["connector.class"] != "datagen" || m["name"] != "gen" {
				t.Fatalf("config %v", m)
			}
		}},
		{name: "list connectors", method: "GET", path: "/connectors", status: 200, check: func(t *testing.T, r response) {
			if diff := cmp.Diff([]any{"gen", "paused", "stopped"}, r.json(t)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		}},
		{name: "list with expand=status", method: "GET", path: "/connectors?expand=status", status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "gen", "paused", "stopped")
			wantKeys(t, m["gen"], "status")
			wantKeys(t, m["gen"].(map[string]any)["status"], "name", "connector", "tasks", "type")
		}},
		{name: "list with expand=status and expand=info", method: "GET", path: "/connectors?expand=status&expand=info", status: 200, check: func(t *testing.T, r response) {
			wantKeys(t, r.obj(t)["gen"], "status", "info")
			wantKeys(t, r.obj(t)["gen"].(map[string]any)["info"], "name", "config", "tasks", "type")
		}},
		{name: "PUT config of a new connector: 201", method: "PUT", path: "/connectors/out/config", body: `{"connector.class":"FileStreamSinkConnector","topics.regex":"gen\\..*","file":"/dev/null"}`, status: 201, check: func(t *testing.T, r response) {
			if m := r.obj(t); m["type"] != "sink" || m["name"] != "out" {
				t.Fatalf("got %v", m)
			}
		}},
		{name: "PUT config of an existing connector: 200", method: "PUT", path: "/connectors/out/config", body: `{"connector.class":"mem","topics.regex":"gen\\..*"}`, status: 200, check: func(t *testing.T, r response) {
			if cfg := r.obj(t)["config"].(map[string]any); cfg["connector.class"] != "mem" || cfg["file"] != nil {
				t.Fatalf("config %v", cfg)
			}
		}},
		{name: "PATCH config: null removes a key, others merge", method: "PATCH", path: "/connectors/gen/config", body: `{"datagen.keys":null,"datagen.rate":"300"}`, status: 200, check: func(t *testing.T, r response) {
			cfg := r.obj(t)["config"].(map[string]any)
			if _, ok := cfg["datagen.keys"]; ok || cfg["datagen.rate"] != "300" || cfg["topic.prefix"] != "gen" {
				t.Fatalf("config %v", cfg)
			}
		}},
		{name: "status", before: waitRunning("gen"), method: "GET", path: "/connectors/gen/status", status: 200, check: func(t *testing.T, r response) {
			if c, tasks := status(t, r); c != "RUNNING" || fmt.Sprint(tasks) != "[RUNNING]" {
				t.Fatalf("connector %s tasks %v", c, tasks)
			}
		}},
		{name: "pause: 202", method: "PUT", path: "/connectors/gen/pause", status: 202},
		{name: "paused status", method: "GET", path: "/connectors/gen/status", status: 200, check: func(t *testing.T, r response) {
			if c, tasks := status(t, r); c != "PAUSED" || fmt.Sprint(tasks) != "[PAUSED]" {
				t.Fatalf("connector %s tasks %v", c, tasks)
			}
		}},
		{name: "resume: 202", method: "PUT", path: "/connectors/gen/resume", status: 202},
		{name: "resume of an unknown connector: 404", method: "PUT", path: "/connectors/nope/resume", status: 404},
		{name: "restart without parameters: 204, no body", before: waitRunning("gen"), method: "POST", path: "/connectors/gen/restart", status: 204, check: func(t *testing.T, r response) {
			if len(r.body) != 0 {
				t.Fatalf("body %q", r.body)
			}
		}},
		{name: "restart with includeTasks: 202 with the status", before: markRestarts, method: "POST", path: "/connectors/gen/restart?includeTasks=true", status: 202, check: func(t *testing.T, r response) {
			status(t, r)
			if n := restartsSinceMark(); n != 1 {
				t.Fatalf("gen logged %d restarts, want 1", n)
			}
		}},
		{name: "restart with onlyFailed of a running connector: 202, nothing restarted", before: func(e *env) { e.waitTask("gen", "RUNNING"); markRestarts(e) }, method: "POST", path: "/connectors/gen/restart?includeTasks=true&onlyFailed=true", status: 202, check: func(t *testing.T, r response) {
			if c, tasks := status(t, r); c != "RUNNING" || fmt.Sprint(tasks) != "[RUNNING]" {
				t.Fatalf("connector %s tasks %v", c, tasks)
			}
			if n := restartsSinceMark(); n != 0 {
				t.Fatalf("gen logged %d restarts, want none: only a failed task restarts", n)
			}
		}},
		{name: "restart with a bad includeTasks: 400", method: "POST", path: "/connectors/gen/restart?includeTasks=yes", status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, `includeTasks must be true or false (got "yes")`)
		}},
		{name: "restart of an unknown connector: 404", method: "POST", path: "/connectors/nope/restart", status: 404},
		{name: "tasks", method: "GET", path: "/connectors/gen/tasks", status: 200, check: func(t *testing.T, r response) {
			list := r.json(t).([]any)
			if len(list) != 1 {
				t.Fatalf("tasks %v", list)
			}
			wantKeys(t, list[0], "id", "config")
			if diff := cmp.Diff(map[string]any{"connector": "gen", "task": 0.0}, list[0].(map[string]any)["id"]); diff != "" {
				t.Fatal(diff)
			}
		}},
		{name: "task status", method: "GET", path: "/connectors/gen/tasks/0/status", status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "id", "state", "worker_id")
			if m["worker_id"] != "test-worker" {
				t.Fatalf("worker %v", m["worker_id"])
			}
		}},
		{name: "status of a task that does not exist: 404", method: "GET", path: "/connectors/gen/tasks/1/status", status: 404},
		{name: "task restart: 204", method: "POST", path: "/connectors/gen/tasks/0/restart", status: 204},
		{name: "active topics", before: func(e *env) {
			waitFor(e.t, "gen's topics", func() bool { ts, _ := e.rt.ActiveTopics("gen"); return len(ts) == 3 })
		}, method: "GET", path: "/connectors/gen/topics", status: 200, check: func(t *testing.T, r response) {
			want := map[string]any{"gen": map[string]any{"topics": []any{"gen.inventory.customers", "gen.inventory.orders", "gen.inventory.products"}}}
			if diff := cmp.Diff(want, r.json(t)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		}},
		{name: "reset active topics: 202", method: "PUT", path: "/connectors/out/topics/reset", status: 202},
		{name: "source offsets: one partition named like Debezium's", method: "GET", path: "/connectors/gen/offsets", status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "offsets")
			list := m["offsets"].([]any)
			if len(list) != 1 {
				t.Fatalf("offsets %v", list)
			}
			wantKeys(t, list[0], "partition", "offset")
			if diff := cmp.Diff(map[string]any{"server": "gen"}, list[0].(map[string]any)["partition"]); diff != "" {
				t.Fatal(diff)
			}
		}},
		{name: "alter offsets while running: 400", method: "PATCH", path: "/connectors/gen/offsets", body: `{"offsets":[{"partition":{"server":"gen"},"offset":{"v":1,"next":5}}]}`, status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, "stop it first (PUT /connectors/gen/stop)")
		}},
		{name: "reset offsets while running: 400", method: "DELETE", path: "/connectors/gen/offsets", status: 400},
		{name: "stop: 204", method: "PUT", path: "/connectors/gen/stop", status: 204},
		{name: "stopped status: STOPPED without tasks", method: "GET", path: "/connectors/gen/status", status: 200, check: func(t *testing.T, r response) {
			if c, tasks := status(t, r); c != "STOPPED" || len(tasks) != 0 {
				t.Fatalf("connector %s tasks %v", c, tasks)
			}
		}},
		{name: "a stopped connector has no tasks", method: "GET", path: "/connectors/gen/tasks", status: 200, check: func(t *testing.T, r response) {
			if string(r.body) != "[]\n" {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "alter source offsets when stopped: 200 with Kafka Connect's message", method: "PATCH", path: "/connectors/gen/offsets", body: `{"offsets":[{"partition":{"server":"gen"},"offset":{"v":1,"next":5}}]}`, status: 200, check: func(t *testing.T, r response) {
			if diff := cmp.Diff(map[string]any{"message": "The offsets for this connector have been altered successfully"}, r.json(t)); diff != "" {
				t.Fatal(diff)
			}
		}},
		{name: "the altered offset is read back", method: "GET", path: "/connectors/gen/offsets", status: 200, check: func(t *testing.T, r response) {
			want := map[string]any{"offsets": []any{map[string]any{"partition": map[string]any{"server": "gen"}, "offset": map[string]any{"v": 1.0, "next": 5.0}}}}
			if diff := cmp.Diff(want, r.json(t)); diff != "" {
				t.Fatal(diff)
			}
		}},
		{name: "alter offsets of another partition: 400", method: "PATCH", path: "/connectors/gen/offsets", body: `{"offsets":[{"partition":{"server":"other"},"offset":{"v":1,"next":5}}]}`, status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, `offsets[0].partition.server must be "gen"`)
		}},
		{name: "reset source offsets when stopped: 200", method: "DELETE", path: "/connectors/gen/offsets", status: 200, check: func(t *testing.T, r response) {
			if diff := cmp.Diff(map[string]any{"message": "The offsets for this connector have been reset successfully"}, r.json(t)); diff != "" {
				t.Fatal(diff)
			}
		}},
		{name: "offsets after a reset: none", method: "GET", path: "/connectors/gen/offsets", status: 200, check: func(t *testing.T, r response) {
			if string(r.body) != `{"offsets":[]}`+"\n" {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "resume a stopped connector: 202", method: "PUT", path: "/connectors/gen/resume", status: 202},
		{name: "sink offsets: kafka_topic, kafka_partition, kafka_offset", before: func(e *env) {
			waitFor(e.t, "the sink's offsets", func() bool { o, _ := e.rt.SinkOffsets("out"); return len(o) == 3 })
		}, method: "GET", path: "/connectors/out/offsets", status: 200, check: func(t *testing.T, r response) {
			list := r.obj(t)["offsets"].([]any)
			if len(list) != 3 {
				t.Fatalf("offsets %v", list)
			}
			wantKeys(t, list[0].(map[string]any)["partition"], "kafka_topic", "kafka_partition")
			wantKeys(t, list[0].(map[string]any)["offset"], "kafka_offset")
		}},
		{name: "stop the sink", method: "PUT", path: "/connectors/out/stop", status: 204},
		{name: "alter sink offsets: 200", method: "PATCH", path: "/connectors/out/offsets", body: `{"offsets":[{"partition":{"kafka_topic":"gen.inventory.orders","kafka_partition":0},"offset":{"kafka_offset":0}},{"partition":{"kafka_topic":"gen.inventory.products","kafka_partition":0},"offset":null}]}`, status: 200},
		{name: "sink offsets after the alteration", method: "GET", path: "/connectors/out/offsets", status: 200, check: func(t *testing.T, r response) {
			list := r.obj(t)["offsets"].([]any)
			got := map[string]float64{}
			for _, x := range list {
				m := x.(map[string]any)
				got[m["partition"].(map[string]any)["kafka_topic"].(string)] = m["offset"].(map[string]any)["kafka_offset"].(float64)
			}
			if o, ok := got["gen.inventory.orders"]; !ok || o != 0 {
				t.Fatalf("orders offset %v in %v", o, got)
			}
			if _, ok := got["gen.inventory.products"]; ok {
				t.Fatalf("products was reset but shows %v", got)
			}
		}},
		{name: "sink offset past the partition's end: 400", method: "PATCH", path: "/connectors/out/offsets", body: `{"offsets":[{"partition":{"kafka_topic":"gen.inventory.orders","kafka_partition":0},"offset":{"kafka_offset":99999999}}]}`, status: 400, check: func(t *testing.T, r response) {
			wantError(t, r, 400, "offsets[0]: gen.inventory.orders-0: offset 99999999 is outside the partition")
		}},
		{name: "reset sink offsets: 200", method: "DELETE", path: "/connectors/out/offsets", status: 200},
		{name: "plugins: connectors only", method: "GET", path: "/connector-plugins", status: 200, check: func(t *testing.T, r response) {
			list := r.json(t).([]any)
			classes := map[string]string{}
			for _, p := range list {
				wantKeys(t, p, "class", "type", "version")
				classes[p.(map[string]any)["class"].(string)] = p.(map[string]any)["type"].(string)
			}
			if classes["io.debezium.connector.mysql.MySqlConnector"] != "source" || classes["org.apache.kafka.connect.file.FileStreamSinkConnector"] != "sink" {
				t.Fatalf("classes %v", classes)
			}
			for c, ty := range classes {
				if ty != "source" && ty != "sink" {
					t.Fatalf("%s is a %s", c, ty)
				}
			}
		}},
		{name: "plugins with connectorsOnly=false list transformations", method: "GET", path: "/connector-plugins?connectorsOnly=false", status: 200, check: func(t *testing.T, r response) {
			if !strings.Contains(string(r.body), `"type":"transformation"`) {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "plugin config definitions", method: "GET", path: "/connector-plugins/MySqlConnector/config", status: 200, check: func(t *testing.T, r response) {
			list := r.json(t).([]any)
			var found map[string]any
			for _, x := range list {
				if x.(map[string]any)["name"] == "database.password" {
					found = x.(map[string]any)
				}
			}
			if found == nil || found["type"] != "PASSWORD" {
				t.Fatalf("database.password: %v", found)
			}
			wantKeys(t, found, "name", "type", "required", "default_value", "importance", "documentation", "group", "width", "display_name", "dependents", "order")
		}},
		{name: "validate a valid config: error_count 0", method: "PUT", path: "/connector-plugins/datagen/config/validate", body: `{"connector.class":"datagen","datagen.keys":"5"}`, status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			wantKeys(t, m, "name", "error_count", "groups", "configs")
			if m["error_count"].(float64) != 0 || m["name"] != "datagen" {
				t.Fatalf("%v %v", m["name"], m["error_count"])
			}
		}},
		{name: "validate an invalid config: errors per key", method: "PUT", path: "/connector-plugins/io.debezium.connector.mysql.MySqlConnector/config/validate", body: `{"database.hostname":"db","database.port":"99999","database.user":"u","database.server.id":"5","topic.prefix":"p"}`, status: 200, check: func(t *testing.T, r response) {
			m := r.obj(t)
			if m["error_count"].(float64) != 1 {
				t.Fatalf("error_count %v", m["error_count"])
			}
			for _, c := range m["configs"].([]any) {
				cm := c.(map[string]any)
				wantKeys(t, cm, "definition", "value")
				v := cm["value"].(map[string]any)
				wantKeys(t, v, "name", "value", "recommended_values", "errors", "visible")
				if v["name"] == "database.port" {
					if diff := cmp.Diff([]any{"must be 1..65535 (got 99999)"}, v["errors"]); diff != "" {
						t.Fatal(diff)
					}
					return
				}
			}
			t.Fatal("no entry for database.port")
		}},
		{name: "validate for an unknown plugin: 404", method: "PUT", path: "/connector-plugins/NoSuchConnector/config/validate", body: `{}`, status: 404},
		{name: "loggers: root has a level", method: "GET", path: "/admin/loggers", status: 200, check: func(t *testing.T, r response) {
			if lv := r.obj(t)["root"].(map[string]any)["level"]; lv != "DEBUG" {
				t.Fatalf("root level %v", lv)
			}
		}},
		{name: "set a logger's level: 200 with the loggers changed", method: "PUT", path: "/admin/loggers/connector.gen", body: `{"level":"WARN"}`, status: 200, check: func(t *testing.T, r response) {
			if diff := cmp.Diff([]any{"connector.gen"}, r.json(t)); diff != "" {
				t.Fatal(diff)
			}
		}},
		{name: "get a logger's level", method: "GET", path: "/admin/loggers/connector.gen", status: 200, check: func(t *testing.T, r response) {
			if lv := r.obj(t)["level"]; lv != "WARN" {
				t.Fatalf("level %v", lv)
			}
		}},
		{name: "set a level cluster-wide: 204", method: "PUT", path: "/admin/loggers/wal?scope=cluster", body: `{"level":"INFO"}`, status: 204},
		{name: "health", method: "GET", path: "/health", status: 200, check: func(t *testing.T, r response) {
			if r.obj(t)["status"] != "healthy" {
				t.Fatalf("%s", r.body)
			}
		}},
		{name: "delete: 204", method: "DELETE", path: "/connectors/paused", status: 204},
		{name: "deleted connector: 404", method: "GET", path: "/connectors/paused", status: 404},
		{name: "unknown endpoint: 404 JSON", method: "GET", path: "/nothing/here", status: 404, check: func(t *testing.T, r response) {
			wantError(t, r, 404, "no endpoint GET /nothing/here")
		}},
		{name: "wrong method: 405 JSON", method: "POST", path: "/connectors/gen/status", status: 405, check: func(t *testing.T, r response) {
			wantError(t, r, 405, "method POST is not allowed on /connectors/gen/status (allowed: GET)")
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.before != nil {
				s.before(e)
			}
			r := e.do(s.method, s.path, s.body)
			if r.status != s.status {
				t.Fatalf("%s %s: status %d, want %d\n%s", s.method, s.path, r.status, s.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); len(r.body) > 0 && ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if s.check != nil {
				s.check(t, r)
			}
		})
	}
	if len(steps) < 30 {
		t.Fatalf("only %d cases", len(steps))
	}
	var all []string
	_ = json.Unmarshal(e.do("GET", "/connectors", "").body, &all)
	t.Logf("%d request/response cases; connectors left: %v", len(steps), all)
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
