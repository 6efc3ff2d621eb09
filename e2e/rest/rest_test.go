// Package rest holds the end-to-end tests of the admin API against the sluice binary: state
// that survives kill -9, TLS and the server's limits.
package rest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-rest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-cdc/sluice/cmd/sluice").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a running sluice.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	base   string
	token  string
	client *http.Client
	done   chan struct{}
}

func start(t *testing.T, pipeline, base, token string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, "run", "-c", pipeline)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, stderr: &stderr, base: base, token: token, done: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.client.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("sluice exited at start: %v\n%s", cmd.ProcessState, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not answer /health within 30s\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) do(method, path, body string) (int, []byte) {
	p.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, p.base+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v\n%s", method, path, err, p.stderr.String())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (p *proc) must(method, path, body string, want int) []byte {
	p.t.Helper()
	code, b := p.do(method, path, body)
	if code != want {
		p.t.Fatalf("%s %s: %d, want %d\n%s", method, path, code, want, b)
	}
	return b
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// snapshot is what a user sees of the connectors: names, configurations, connector states,
// and the offsets of the connectors that do not move.
func snapshot(t *testing.T, p *proc, fixed ...string) map[string]any {
	t.Helper()
	all := decode(t, p.must("GET", "/connectors?expand=status&expand=info", "", 200)).(map[string]any)
	out := map[string]any{}
	for name, v := range all {
		m := v.(map[string]any)
		st := m["status"].(map[string]any)
		var tasks []any
		for _, tk := range st["tasks"].([]any) {
			tasks = append(tasks, tk.(map[string]any)["state"])
		}
		out[name] = map[string]any{
			"config": m["info"].(map[string]any)["config"],
			"state":  st["connector"].(map[string]any)["state"],
			"tasks":  tasks,
		}
	}
	for _, name := range fixed {
		out[name+"/offsets"] = decode(t, p.must("GET", "/connectors/"+name+"/offsets", "", 200))
	}
	return out
}

// Connectors created and changed through the API, and the state of a file connector, survive a
// kill -9 of sluice: same connectors, configurations, states and offsets.
func TestRestartPersistence(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	const token = "e2e-token-31f9"
	pipeline := filepath.Join(dir, "pipeline.yaml")
	os.WriteFile(pipeline, []byte(fmt.Sprintf(`log:
  dir: %s/log
rest:
  listeners: [%s]
  auth:
    token: ${env:E2E_TOKEN}
connectors:
  - name: filegen
    class: datagen
    config:
      topic.prefix: f
      datagen.rate: 200
      offset.flush.interval.ms: 0
`, dir, base)), 0o644)
	env := "E2E_TOKEN=" + token
	p := start(t, pipeline, base, token, env)

	body := func(name, state, cfg string) string {
		s := `{"name":"` + name + `","config":{` + cfg + `}`
		if state != "" {
			s += `,"initial_state":"` + state + `"`
		}
		return s + "}"
	}
	dg := func(prefix string) string {
		return `"connector.class":"datagen","topic.prefix":"` + prefix + `","datagen.rate":"300","datagen.keys":"30","offset.flush.interval.ms":"0"`
	}
	out := filepath.Join(dir, "view.jsonl")
	p.must("POST", "/connectors", body("apigen", "", dg("a")), 201)
	p.must("POST", "/connectors", body("apiout", "", `"connector.class":"FileStreamSinkConnector","topics.regex":"a\\..*","file":"`+out+`"`), 201)
	p.must("POST", "/connectors", body("apipaused", "", dg("p")), 201)
	p.must("POST", "/connectors", body("apistopped", "STOPPED", dg("s")), 201)
	p.must("POST", "/connectors", body("gone", "", dg("g")), 201)
	p.must("PUT", "/connectors/apistopped/config", `{`+dg("s")+`,"datagen.keys":"31"}`, 400) // duplicate key
	p.must("PATCH", "/connectors/apistopped/config", `{"datagen.keys":"31"}`, 200)
	p.must("PATCH", "/connectors/apistopped/offsets", `{"offsets":[{"partition":{"server":"s"},"offset":{"v":1,"next":123}}]}`, 200)
	time.Sleep(500 * time.Millisecond)
	p.must("PUT", "/connectors/apipaused/pause", "", 202)
	p.must("PUT", "/connectors/filegen/pause", "", 202)
	p.must("DELETE", "/connectors/gone", "", 204)
	time.Sleep(300 * time.Millisecond) // the paused ones finish their batch in flight
	before := snapshot(t, p, "apipaused", "apistopped", "filegen")
	// The sink commits once a second while records keep coming: wait for a first commit.
	var sinkBefore any
	for deadline := time.Now().Add(10 * time.Second); ; {
		sinkBefore = decode(t, p.must("GET", "/connectors/apiout/offsets", "", 200))
		if offs, _ := sinkBefore.(map[string]any)["offsets"].([]any); len(offs) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.kill()

	p = start(t, pipeline, base, token, env)
	after := snapshot(t, p, "apipaused", "apistopped", "filegen")
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("connectors after kill -9 and a restart (-before +after):\n%s", diff)
	}
	if _, ok := after["gone"]; ok {
		t.Fatal("the deleted connector came back")
	}
	// The sink resumes from its committed offsets: none went backwards.
	sinkAfter := decode(t, p.must("GET", "/connectors/apiout/offsets", "", 200))
	offs := func(v any) map[string]float64 {
		m := map[string]float64{}
		for _, e := range v.(map[string]any)["offsets"].([]any) {
			em := e.(map[string]any)
			m[em["partition"].(map[string]any)["kafka_topic"].(string)] = em["offset"].(map[string]any)["kafka_offset"].(float64)
		}
		return m
	}
	b, a := offs(sinkBefore), offs(sinkAfter)
	if len(b) == 0 {
		t.Fatal("the sink had committed nothing before the kill: the test proves little")
	}
	for tp, o := range b {
		if a[tp] < o {
			t.Fatalf("sink offset of %s went from %v to %v", tp, o, a[tp])
		}
	}
	// The stopped connector resumes at its altered offset.
	p.must("PUT", "/connectors/apistopped/resume", "", 202)
	deadline := time.Now().Add(10 * time.Second)
	for {
		o := decode(t, p.must("GET", "/connectors/apistopped/offsets", "", 200)).(map[string]any)["offsets"].([]any)
		if len(o) == 1 && o[0].(map[string]any)["offset"].(map[string]any)["next"].(float64) > 123 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("apistopped's offset did not move on from 123: %v", o)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, _ := p.do("GET", "/topics/s.inventory.orders/partitions/0/records?offset=0&limit=1", "")
	if code != 200 {
		t.Fatalf("records of apistopped's topic: %d", code)
	}
	if strings.Contains(p.stderr.String(), token) {
		t.Fatal("the token appears in the log")
	}
}

// selfSigned writes a certificate and key for 127.0.0.1.
func selfSigned(t *testing.T, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cert, keyf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, keyf
}

// With TLS configured the API speaks only HTTPS; the server refuses oversized headers; the
// client commands work against it.
func TestTLSAndLimits(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	port := freePort(t)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	pipeline := filepath.Join(dir, "pipeline.yaml")
	os.WriteFile(pipeline, []byte(fmt.Sprintf("log:\n  dir: %s/log\nrest:\n  listeners: [\"%s\"]\n  tls:\n    cert: %s\n    key: %s\n", dir, base, cert, key)), 0o644)
	p := start(t, pipeline, base, "")
	p.must("GET", "/connectors", "", 200)
	// Plain HTTP on the TLS port gets no API.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/connectors", port))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("plain HTTP served the API: %s", b)
		}
	}
	req, _ := http.NewRequest("GET", base+"/connectors", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err = p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header: %d, want 431", resp.StatusCode)
	}
	// The CLI.
	var stdout, stderr bytes.Buffer
	run := func(args ...string) int {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.Command(bin, append(args, "--server", base, "--insecure")...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			t.Fatal(err)
		}
		return 0
	}
	spec := filepath.Join(dir, "gen.json")
	os.WriteFile(spec, []byte(`{"name":"gen","config":{"connector.class":"datagen","topic.prefix":"c","datagen.rate":"100"}}`), 0o644)
	if code := run("connectors", "create", "-f", spec); code != 0 || stdout.String() != "connector gen created (source)\n" {
		t.Fatalf("create: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "create", "-f", spec); code != 1 || !strings.Contains(stderr.String(), "409 Conflict: create connector gen: connector already exists") {
		t.Fatalf("create again: %d %q", code, stderr.String())
	}
	if code := run("connectors", "list"); code != 0 || !strings.Contains(stdout.String(), "gen   source  datagen  RUNNING") {
		t.Fatalf("list: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "status", "gen", "-o", "json"); code != 0 || decode(t, stdout.Bytes()).(map[string]any)["name"] != "gen" {
		t.Fatalf("status -o json: %d %q", code, stdout.String())
	}
	if code := run("connectors", "stop", "gen"); code != 0 || stdout.String() != "connector gen stopped\n" {
		t.Fatalf("stop: %d %q %q", code, stdout.String(), stderr.String())
	}
	offs := filepath.Join(dir, "offsets.json")
	os.WriteFile(offs, []byte(`{"offsets":[{"partition":{"server":"c"},"offset":{"v":1,"next":10}}]}`), 0o644)
	if code := run("offsets", "set", "gen", "-f", offs); code != 0 {
		t.Fatalf("offsets set: %d %q", code, stderr.String())
	}
	if code := run("offsets", "get", "gen"); code != 0 || !strings.Contains(stdout.String(), `{"server":"c"}  {"v":1,"next":10}`) {
		t.Fatalf("offsets get: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("offsets", "reset", "gen"); code != 0 || stdout.String() != "offsets of gen reset\n" {
		t.Fatalf("offsets reset: %d %q", code, stderr.String())
	}
	if code := run("connectors", "resume", "gen"); code != 0 {
		t.Fatal(stderr.String())
	}
	if code := run("connectors", "get", "gen"); code != 0 || !strings.HasPrefix(stdout.String(), "Name: gen\nType: source\n") || !strings.Contains(stdout.String(), "connector.class  datagen") {
		t.Fatalf("get: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "pause", "gen"); code != 0 || stdout.String() != "connector gen paused\n" {
		t.Fatalf("pause: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "status", "gen"); code != 0 || !strings.Contains(stdout.String(), "connector gen (source)  PAUSED") {
		t.Fatalf("status after pause: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "resume", "gen"); code != 0 || stdout.String() != "connector gen resumed\n" {
		t.Fatalf("resume: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "restart", "gen", "--include-tasks", "-o", "json"); code != 0 || decode(t, stdout.Bytes()).(map[string]any)["name"] != "gen" {
		t.Fatalf("restart --include-tasks -o json: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("topics", "list"); code != 0 || !strings.Contains(stdout.String(), "__sluice_connect_configs") {
		t.Fatalf("topics list: %d %q %q", code, stdout.String(), stderr.String())
	}
	if code := run("connectors", "delete", "nope"); code != 1 || !strings.Contains(stderr.String(), "sluice: 404 Not Found: connector nope not found") {
		t.Fatalf("delete unknown: %d %q", code, stderr.String())
	}
	if code := run("connectors", "frob"); code != 2 {
		t.Fatalf("unknown subcommand: %d", code)
	}
}
