package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connect"
)

func TestRESTDefaults(t *testing.T) {
	p, errs := load(t, "log:\n  dir: /tmp/x\n")
	if errs != nil {
		t.Fatal(errs)
	}
	want := []config.Listener{{Addr: "127.0.0.1:8083"}}
	if diff := cmp.Diff(want, p.REST.Listeners); diff != "" {
		t.Fatalf("default listeners (-want +got):\n%s", diff)
	}
	if p.REST.Token != "" || p.REST.Public() {
		t.Fatalf("default: token %q public %v", p.REST.Token.Reveal(), p.REST.Public())
	}
}

func TestRESTSettings(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, errs := load(t, fmt.Sprintf(`log:
  dir: /tmp/x
rest:
  listeners: [http://127.0.0.1:0, "https://0.0.0.0:8443"]
  auth:
    token: ${env:BAD_KEYS}
  tls:
    cert: %s
    key: %s
`, cert, key))
	if errs != nil {
		t.Fatal(errs)
	}
	want := []config.Listener{{Addr: "127.0.0.1:0"}, {TLS: true, Addr: "0.0.0.0:8443"}}
	if diff := cmp.Diff(want, p.REST.Listeners); diff != "" {
		t.Fatalf("listeners (-want +got):\n%s", diff)
	}
	if p.REST.Token.Reveal() != "s3cr3t-value" || p.REST.TokenWritten != "${env:BAD_KEYS}" || !p.REST.Public() {
		t.Fatalf("token %q written %q public %v", p.REST.Token.Reveal(), p.REST.TokenWritten, p.REST.Public())
	}
	if s := fmt.Sprint(p.REST.Token); s != "****" {
		t.Fatalf("the token prints as %q", s)
	}
	p, errs = load(t, "log:\n  dir: /tmp/x\nrest:\n  listeners: []\n")
	if errs != nil || len(p.REST.Listeners) != 0 {
		t.Fatalf("empty listeners: %v %v", p.REST.Listeners, errs)
	}
}

func TestRESTErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"bad scheme", "rest:\n  listeners: [ftp://x:1]\n", `pipeline.yaml:4:14: rest.listeners[0]: must be http://host:port or https://host:port (got "ftp://x:1")`},
		{"no port", "rest:\n  listeners: [localhost]\n", `pipeline.yaml:4:14: rest.listeners[0]: must be http://host:port or https://host:port (got "localhost")`},
		{"https without tls", "rest:\n  listeners: [\"https://127.0.0.1:1\"]\n", `pipeline.yaml:4:3: rest.listeners: https://127.0.0.1:1 needs rest.tls.cert and rest.tls.key`},
		{"unknown key", "rest:\n  listener: [x]\n", `pipeline.yaml:4:3: rest.listener: unknown key; did you mean "listeners"?`},
		{"unknown auth key", "rest:\n  auth:\n    tokn: x\n", `pipeline.yaml:5:5: rest.auth.tokn: unknown key; did you mean "token"?`},
		{"unset variable", "rest:\n  auth:\n    token: ${env:NOPE}\n", `pipeline.yaml:5:5: rest.auth.token: environment variable NOPE is not set (from ${env:NOPE})`},
		{"empty token", "rest:\n  auth:\n    token: \"\"\n", `pipeline.yaml:5:12: rest.auth.token: must not be empty (leave auth out for an API without a token)`},
		{"cert without key", "rest:\n  tls:\n    cert: /etc/hostname\n", `pipeline.yaml:4:3: rest.tls: set both cert and key`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := load(t, "log:\n  dir: /tmp/x\n"+tc.text)
			if diff := cmp.Diff([]string{tc.want}, errs); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveConfig(t *testing.T) {
	got, errs := config.ResolveConfig(map[string]string{"a": "${env:PREFIX}-x", "b": "plain", "c": "${env:NOPE}", "d": "${table}:${key}"}, lookup)
	want := []connect.FieldError{{Key: "c", Message: "environment variable NOPE is not set (from ${env:NOPE})"}}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Fatalf("errors (-want +got):\n%s", diff)
	}
	if got["a"] != "demo-x" || got["b"] != "plain" || got["d"] != "${table}:${key}" {
		t.Fatalf("resolved %v", got)
	}
}
