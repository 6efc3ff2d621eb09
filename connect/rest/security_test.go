package rest_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With a token, every request but GET /health needs it, as a bearer token or as the HTTP Basic
// password; nothing else gets in.
func TestTokenEnforced(t *testing.T) {
	const token = "tok-8d1e77c2"
	e := newEnv(t, envOptions{token: token})
	basic := func(user, pw string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw)) }
	endpoints := [][2]string{
		{"GET", "/"}, {"GET", "/connectors"}, {"POST", "/connectors"}, {"GET", "/connectors/x/status"},
		{"PUT", "/connectors/x/pause"}, {"DELETE", "/connectors/x"}, {"GET", "/connector-plugins"},
		{"GET", "/admin/loggers"}, {"PUT", "/admin/loggers/root"}, {"GET", "/topics"}, {"GET", "/metrics"},
		{"GET", "/connectors/x/wait?position=1"}, {"POST", "/connectors/x/rebuild"},
	}
	for _, ep := range endpoints {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", basic("admin", "wrong"), "Basic !!!", "Token " + token} {
			r := e.do(ep[0], ep[1]+"", "", "Authorization", auth)
			if r.status != http.StatusUnauthorized {
				t.Fatalf("%s %s with %q: status %d, want 401\n%s", ep[0], ep[1], auth, r.status, r.body)
			}
			wantError(t, r, 401, "authentication required")
			if !strings.Contains(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
			}
		}
	}
	// The token in the query string is not accepted.
	if r := e.do("GET", "/connectors?token="+token, "", "Authorization", ""); r.status != 401 {
		t.Fatalf("token in the query: %d", r.status)
	}
	for _, auth := range []string{"Bearer " + token, basic("admin", token), basic("", token)} {
		if r := e.do("GET", "/connectors", "", "Authorization", auth); r.status != 200 {
			t.Fatalf("with %q: status %d\n%s", auth, r.status, r.body)
		}
	}
	if r := e.do("GET", "/health", "", "Authorization", ""); r.status != 200 {
		t.Fatalf("health without a token: %d", r.status)
	}
}

// Canary values (a password written inline, a placeholder's resolved value) appear in no answer
// and no log line, whatever is asked.
func TestSecretsNeverShown(t *testing.T) {
	const (
		inline = "canary-inline-52b1"
		envPW  = "canary-env-7f3a"
		envBad = "canary-port-91c4"
	)
	canaries := []string{inline, envPW, envBad}
	e := newEnv(t, envOptions{environ: map[string]string{"CANARY_PW": envPW, "CANARY_PORT": envBad}})
	var answers []response
	do := func(method, path, body string, want int) response {
		t.Helper()
		r := e.do(method, path, body)
		if want != 0 && r.status != want {
			t.Fatalf("%s %s: status %d, want %d\n%s", method, path, r.status, want, r.body)
		}
		answers = append(answers, r)
		return r
	}
	mysqlCfg := func(extra string) string {
		return `"connector.class":"io.debezium.connector.mysql.MySqlConnector","database.hostname":"127.0.0.1","database.port":"1","database.user":"cdc","database.server.id":"77","topic.prefix":"shop","connect.timeout.ms":"200"` + extra
	}
	// A running source whose password is inline: its task fails to connect and logs.
	do("POST", "/connectors", `{"name":"inl","config":{`+mysqlCfg(`,"database.password":"`+inline+`"`)+`}}`, 201)
	// A stopped one with the password from the environment.
	do("POST", "/connectors", `{"name":"env","initial_state":"STOPPED","config":{`+mysqlCfg(`,"database.password":"${env:CANARY_PW}"`)+`}}`, 201)
	// Invalid configurations that carry the canaries.
	r := do("POST", "/connectors", `{"name":"bad","config":{`+strings.Replace(mysqlCfg(`,"database.password":"`+inline+`"`), `"database.port":"1"`, `"database.port":"${env:CANARY_PORT}"`, 1)+`}}`, 400)
	if msg := r.obj(t)["message"].(string); !strings.Contains(msg, `database.port: must be an integer (got ${env:CANARY_PORT})`) {
		t.Fatalf("the error about database.port does not hide the resolved value: %s", r.body)
	}
	do("POST", "/connectors", `{"name":"bad2","config":{`+mysqlCfg(`,"database.password":"`+inline+`","datbase.pasword":"`+inline+`"`)+`}}`, 400)
	do("PUT", "/connector-plugins/MySqlConnector/config/validate", `{`+strings.Replace(mysqlCfg(`,"database.password":"`+inline+`","unknown.secret.token":"`+inline+`"`), `"database.port":"1"`, `"database.port":"${env:CANARY_PORT}"`, 1)+`}`, 200)
	do("PUT", "/connector-plugins/MySqlConnector/config/validate", `{`+mysqlCfg(`,"database.password":"${env:CANARY_PW}"`)+`}`, 200)
	e.waitTask("inl", "RESTARTING")
	// The configuration read back can be sent back unchanged: "****" keeps the stored secret.
	cfg := do("GET", "/connectors/inl/config", "", 200).body
	if !strings.Contains(string(cfg), `"database.password":"****"`) {
		t.Fatalf("config %s", cfg)
	}
	do("PUT", "/connectors/inl/config", string(cfg), 200)
	if _, written, _ := e.rt.Written("inl"); written["database.password"] != inline {
		t.Fatalf("after a PUT of the redacted config the stored password is %q", written["database.password"])
	}
	do("PATCH", "/connectors/inl/config", `{"connect.timeout.ms":"300","database.password":"****"}`, 200)
	if _, written, _ := e.rt.Written("inl"); written["database.password"] != inline {
		t.Fatal("PATCH with **** lost the stored password")
	}
	do("PATCH", "/connectors/env/config", `{"database.port":"${env:CANARY_PORT}"}`, 400)
	cfg = do("GET", "/connectors/env/config", "", 200).body
	if !strings.Contains(string(cfg), `"database.password":"${env:CANARY_PW}"`) {
		t.Fatalf("the placeholder is not shown as written: %s", cfg)
	}
	time.Sleep(300 * time.Millisecond) // a few more failed connection attempts in the logs
	for _, n := range []string{"inl", "env"} {
		for _, p := range []string{"", "/config", "/status", "/tasks", "/tasks/0/status", "/offsets", "/topics", "/lag"} {
			do("GET", "/connectors/"+n+p, "", 0)
		}
	}
	for _, p := range []string{"/connectors?expand=status&expand=info", "/connector-plugins/MySqlConnector/config", "/metrics", "/topics", "/admin/loggers"} {
		do("GET", p, "", 200)
	}
	topics := do("GET", "/topics", "", 200)
	for _, tp := range topics.json(t).([]any) {
		name := tp.(map[string]any)["name"].(string)
		r := do("GET", "/topics/"+name+"/partitions/0/records?limit=1000", "", 0)
		if name == "__sluice_connect_configs" && r.status != http.StatusForbidden {
			t.Fatalf("records of the configs topic: %d", r.status)
		}
	}
	for _, c := range canaries {
		for _, a := range answers {
			if strings.Contains(string(a.body), c) || strings.Contains(strings.Join(headerValues(a.header), " "), c) {
				t.Fatalf("canary %q in an answer (%d): %s", c, a.status, a.body)
			}
		}
		if strings.Contains(e.logs.String(), c) {
			t.Fatalf("canary %q in the logs:\n%s", c, e.logs.String())
		}
	}
	if !strings.Contains(e.logs.String(), "connector=inl") {
		t.Fatal("the logs say nothing about the failing connector: the check above proves little")
	}
	t.Logf("%d answers and %d bytes of logs checked", len(answers), len(e.logs.String()))
}

func headerValues(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k)
		out = append(out, vs...)
	}
	return out
}

// Malformed and hostile requests get the right 4xx and a message naming what is wrong.
func TestHostileRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, body := range []string{
		datagenJSON("gen", ""),
		strings.Replace(datagenJSON("still", ""), `{"name"`, `{"initial_state":"STOPPED","name"`, 1),
		`{"name":"out","initial_state":"STOPPED","config":{"connector.class":"mem","topics":"gen.inventory.orders"}}`,
	} {
		if r := e.do("POST", "/connectors", body); r.status != 201 {
			t.Fatalf("setup: %d %s", r.status, r.body)
		}
	}
	waitFor(t, "gen's topics", func() bool { ts, _ := e.rt.ActiveTopics("gen"); return len(ts) == 3 })
	long := strings.Repeat("n", 300)
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	huge := `{"name":"h","config":{"x":"` + strings.Repeat("a", 70<<10) + `"}}`
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		msg                      string
	}{
		{"truncated JSON", "POST", "/connectors", `{`, nil, 400, "request body is not valid JSON"},
		{"an array", "POST", "/connectors", `[]`, nil, 400, "request body must be a JSON object (got an array)"},
		{"a string", "POST", "/connectors", `"x"`, nil, 400, "request body must be a JSON object (got a string)"},
		{"empty body", "POST", "/connectors", ` `, nil, 400, "request body is empty"},
		{"trailing data", "POST", "/connectors", `{"name":"a","config":{}} {}`, nil, 400, "unexpected data after the JSON object"},
		{"unknown field", "POST", "/connectors", `{"name":"a","config":{},"extra":1}`, nil, 400, `unknown field "extra"`},
		{"misspelt field", "POST", "/connectors", `{"nam":"a","config":{}}`, nil, 400, `unknown field "nam"; did you mean "name"?`},
		{"name of the wrong type", "POST", "/connectors", `{"name":5,"config":{}}`, nil, 400, "name must be a string (got a number)"},
		{"config an array", "POST", "/connectors", `{"name":"a","config":[]}`, nil, 400, "config must be a JSON object (got an array)"},
		{"config null", "POST", "/connectors", `{"name":"a","config":null}`, nil, 400, "config must be a JSON object (got null)"},
		{"config value an object", "POST", "/connectors", `{"name":"a","config":{"k":{"x":1}}}`, nil, 400, "config.k must be a string, a number or a boolean (got an object)"},
		{"config value an array", "POST", "/connectors", `{"name":"a","config":{"k":[1]}}`, nil, 400, "config.k must be a string, a number or a boolean (got an array)"},
		{"deeply nested value", "POST", "/connectors", `{"name":"a","config":{"k":` + deep + `}}`, nil, 400, "config.k"},
		{"duplicate field", "POST", "/connectors", `{"name":"a","name":"b","config":{}}`, nil, 400, `duplicate field "name"`},
		{"duplicate config key", "POST", "/connectors", `{"name":"a","config":{"x":"1","x":"2"}}`, nil, 400, `duplicate field "config.x"`},
		{"name with a path", "POST", "/connectors", `{"name":"a/../b","config":{"connector.class":"datagen"}}`, nil, 400, `name: must be 1 to 200 of A-Z a-z 0-9 . _ - (got "a/../b")`},
		{"name too long", "POST", "/connectors", `{"name":"` + long + `","config":{"connector.class":"datagen"}}`, nil, 400, "name: must be 1 to 200 of"},
		{"empty name", "POST", "/connectors", `{"name":"  ","config":{}}`, nil, 400, "name is required"},
		{"unknown class", "POST", "/connectors", `{"name":"a","config":{"connector.class":"Nope"}}`, nil, 400, `connector.class: unknown connector class "Nope"`},
		{"value of the wrong type", "POST", "/connectors", `{"name":"a","config":{"connector.class":"datagen","datagen.keys":"abc"}}`, nil, 400, `datagen.keys: must be an integer (got "abc")`},
		{"empty config key", "POST", "/connectors", `{"name":"a","config":{"":"x"}}`, nil, 400, "config has an empty key"},
		{"NUL in a value", "POST", "/connectors", `{"name":"a","config":{"k":"a\u0000b"}}`, nil, 400, "config.k must not contain NUL characters"},
		{"number out of range", "PUT", "/connectors/a/config", `{"k":1.5e999}`, nil, 400, "k is not a valid number"},
		{"body over the limit", "POST", "/connectors", huge, nil, 413, "request body is larger than 65536 bytes"},
		{"not JSON content", "POST", "/connectors", `name=a`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "Content-Type must be application/json"},
		{"invalid UTF-8", "POST", "/connectors", "{\"name\":\"\xff\xfe\",\"config\":{}}", nil, 400, "request body is not valid UTF-8"},
		{"PUT config naming another connector", "PUT", "/connectors/a/config", `{"name":"b"}`, nil, 400, "config.name (b) does not match the connector's name (a)"},
		{"dot-dot segment", "GET", "/connectors/%2e%2e/config", "", nil, 400, `has an empty, "." or ".." segment`},
		{"empty segment", "GET", "/connectors//status", "", nil, 400, `has an empty, "." or ".." segment`},
		{"encoded slash stays in the name", "GET", "/connectors/gen%2Fstatus", "", nil, 404, "connector gen/status not found"},
		{"control character in the path", "GET", "/connectors/a%0Ab", "", nil, 400, "contains control characters"},
		{"task not a number", "GET", "/connectors/gen/tasks/abc/status", "", nil, 400, `task must be a task number (got "abc")`},
		{"negative task", "GET", "/connectors/gen/tasks/-1/status", "", nil, 400, `task must be a task number (got "-1")`},
		{"bad includeTasks", "POST", "/connectors/gen/restart?includeTasks=maybe", "", nil, 400, `includeTasks must be true or false (got "maybe")`},
		{"bad expand", "GET", "/connectors?expand=everything", "", nil, 400, `expand must be status or info (got "everything")`},
		{"unknown query parameter", "GET", "/connectors/gen/status?foo=1", "", nil, 400, `unknown query parameter "foo"`},
		{"records limit too high", "GET", "/topics/gen.inventory.orders/partitions/0/records?limit=100000", "", nil, 400, "limit must be 1..1000"},
		{"records offset not a number", "GET", "/topics/gen.inventory.orders/partitions/0/records?offset=abc", "", nil, 400, `offset must be an integer (got "abc")`},
		{"records offset outside", "GET", "/topics/gen.inventory.orders/partitions/0/records?offset=-5", "", nil, 416, "offset -5 is outside gen.inventory.orders-0"},
		{"records of the configs topic", "GET", "/topics/__sluice_connect_configs/partitions/0/records", "", nil, 403, "holds connector configurations"},
		{"records of a missing partition", "GET", "/topics/gen.inventory.orders/partitions/9/records", "", nil, 404, "topic gen.inventory.orders has no partition 9"},
		{"partition not a number", "GET", "/topics/gen.inventory.orders/partitions/x/records", "", nil, 400, `partition must be a partition number (got "x")`},
		{"unknown topic", "GET", "/topics/nope", "", nil, 404, "topic nope not found"},
		{"wait without a position", "GET", "/connectors/out/wait", "", nil, 400, "position is required"},
		{"wait too long", "GET", "/connectors/out/wait?position=5&timeout=10h", "", nil, 400, "timeout must be above 0 and at most 20s"},
		{"wait timeout not a duration", "GET", "/connectors/out/wait?position=5&timeout=abc", "", nil, 400, `timeout must be a duration like 30s or milliseconds (got "abc")`},
		{"wait on a source", "GET", "/connectors/gen/wait?position=5", "", nil, 400, "wait on the sink connector"},
		{"wait with a position no source has", "GET", "/connectors/out/wait?position=0/16B3748", "", nil, 400, "no source connector has positions like"},
		{"wait given twice", "GET", "/connectors/out/wait?position=5&position=6", "", nil, 400, "position is given 2 times"},
		{"offsets not an array", "PATCH", "/connectors/still/offsets", `{"offsets":"x"}`, nil, 400, "offsets must be an array (got a string)"},
		{"offsets empty", "PATCH", "/connectors/still/offsets", `{"offsets":[]}`, nil, 400, "offsets must not be empty"},
		{"offset missing", "PATCH", "/connectors/still/offsets", `{"offsets":[{"partition":{"server":"still"}}]}`, nil, 400, "offsets[0].offset is required"},
		{"offset with an unknown field", "PATCH", "/connectors/still/offsets", `{"offsets":[{"partition":{"server":"still"},"offset":{"v":1,"nxt":3}}]}`, nil, 400, `offsets[0].offset.nxt: unknown field; did you mean "next"?`},
		{"offset of the wrong type", "PATCH", "/connectors/still/offsets", `{"offsets":[{"partition":{"server":"still"},"offset":{"v":1,"next":"x"}}]}`, nil, 400, `offsets[0].offset.next: must be a non-negative integer (got "x")`},
		{"offsets entry with an unknown field", "PATCH", "/connectors/still/offsets", `{"offsets":[{"partition":{},"offset":{},"x":1}]}`, nil, 400, `unknown field "offsets[0].x"`},
		{"sink partition as a string", "PATCH", "/connectors/out/offsets", `{"offsets":[{"partition":{"kafka_topic":"t","kafka_partition":"0"},"offset":{"kafka_offset":1}}]}`, nil, 400, "offsets[0].partition.kafka_partition must be an integer (got a string)"},
		{"negative sink offset", "PATCH", "/connectors/out/offsets", `{"offsets":[{"partition":{"kafka_topic":"gen.inventory.orders","kafka_partition":0},"offset":{"kafka_offset":-3}}]}`, nil, 400, "offsets[0].offset.kafka_offset must be an integer in 0.."},
		{"sink offset of a missing topic", "PATCH", "/connectors/out/offsets", `{"offsets":[{"partition":{"kafka_topic":"nope","kafka_partition":0},"offset":{"kafka_offset":0}}]}`, nil, 400, "offsets[0]: nope-0: topic nope does not exist"},
		{"bad log level", "PUT", "/admin/loggers/x", `{"level":"LOUD"}`, nil, 400, `level must be one of OFF, FATAL, ERROR, WARN, INFO, DEBUG, TRACE (got "LOUD")`},
		{"misspelt level field", "PUT", "/admin/loggers/x", `{"lvl":"DEBUG"}`, nil, 400, `unknown field "lvl"; did you mean "level"?`},
		{"method not allowed", "DELETE", "/connectors", "", nil, 405, "method DELETE is not allowed on /connectors (allowed: GET, POST)"},
		{"rebuild of a source", "POST", "/connectors/gen/rebuild", "", nil, 400, "the sink cannot rebuild its view"},
		{"rebuild of a stopped sink", "POST", "/connectors/out/rebuild", "", nil, 409, "the connector's task is not running"},
		{"validate with a body that is not an object", "PUT", "/connector-plugins/datagen/config/validate", `[1]`, nil, 400, "request body must be a JSON object (got an array)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.body, tc.hdr...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d\n%s", r.status, tc.status, r.body)
			}
			wantError(t, r, tc.status, tc.msg)
		})
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	// None of them changed anything.
	if names := e.rt.Names(); strings.Join(names, ",") != "gen,out,still" {
		t.Fatalf("connectors after the hostile requests: %v", names)
	}
}
