package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/config"
)

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A directory of files is one pipeline: files in name order, the log section in one of them.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "00-log.yaml", "log:\n  dir: data\n  fsync: unsafe-never\n")
	write(t, dir, "10-gen.yml", "connectors:\n  - name: gen\n    class: datagen\n")
	write(t, dir, "20-out.yaml", "connectors:\n  - name: out\n    class: file\n    config:\n      topics: a\n      file: out.jsonl\n")
	write(t, dir, "notes.txt", "not yaml")
	p, err := config.Open([]string{dir}, lookup, checker(t))
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "data"); p.Log.Dir != want || p.Log.Fsync != config.FsyncUnsafeNever {
		t.Fatalf("log %+v, want dir %s relative to the working directory", p.Log, want)
	}
	var names []string
	for _, c := range p.Connectors {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"gen", "out"}, names); diff != "" {
		t.Fatal(diff)
	}
	if len(p.Files) != 3 {
		t.Fatalf("files %v", p.Files)
	}
}

func TestLoadDirectoryErrors(t *testing.T) {
	dir := t.TempDir()
	a := write(t, dir, "a.yaml", "log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n")
	b := write(t, dir, "b.yaml", "log:\n  dir: /y\nconnectors:\n  - name: gen\n    class: datagen\n")
	empty := t.TempDir()
	_, err := config.Open([]string{dir, empty, filepath.Join(dir, "missing.yaml")}, lookup, checker(t))
	got := strings.Split(err.Error(), "\n")
	want := []string{
		b + ":1:1: log: is already set in " + a + ":1:1; set it in one file only",
		b + `:4:5: connectors[gen].name: duplicate connector name "gen"; first at ` + a + ":4:5",
		filepath.Join(dir, "missing.yaml") + ": cannot read: no such file or directory",
		empty + ": the directory holds no .yaml or .yml file",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestSecretPrintsRedacted(t *testing.T) {
	s := config.Secret("hunter2")
	for _, out := range []string{s.String(), s.GoString()} {
		if out != "****" {
			t.Fatalf("secret renders as %q", out)
		}
	}
	if b, _ := s.MarshalText(); string(b) != "****" || s.Reveal() != "hunter2" {
		t.Fatal("MarshalText or Reveal")
	}
}

// FuzzOpen: any input yields a pipeline or errors that each carry file:line:col (or the file
// alone), never a panic.
func FuzzOpen(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("log:\n  dir: /x\nconnectors:\n  - name: a\n    class: file\n    config:\n      file: ${file:/p:k}\n"))
	f.Add([]byte("log: [a, b\n"))
	f.Add([]byte("a: &x 1\nb: *x\n<<: {c: 1}\n"))
	f.Add([]byte("log:\n  dir: !!str 1\n  topic: {retention.ms: 5}\n---\n- 1\n"))
	ch := checker(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := config.OpenBytes("f.yaml", data, lookup, ch)
		if err == nil {
			if p == nil || p.Log.Dir == "" {
				t.Fatalf("no error but pipeline %+v", p)
			}
			return
		}
		var errs config.Errors
		if !errorsAs(err, &errs) || len(errs) == 0 {
			t.Fatalf("error %T %v is not Errors", err, err)
		}
		for _, e := range errs {
			if e.File != "f.yaml" || e.Line <= 0 || e.Col <= 0 || e.Msg == "" {
				t.Fatalf("error without a place or message: %#v", e)
			}
		}
	})
}

// Printing a pipeline never shows a resolved placeholder.
func TestPrintingHidesResolvedValues(t *testing.T) {
	p, err := config.OpenBytes("p.yaml", []byte("log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      topic.prefix: ${env:BAD_KEYS}\n"), lookup, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v", p), fmt.Sprintf("%+v", *p.Connectors[0]), fmt.Sprintf("%#v", *p.Connectors[0])} {
		if strings.Contains(s, "s3cr3t-value") {
			t.Fatalf("printed a resolved secret: %s", s)
		}
	}
	if p.Connectors[0].Resolved()["topic.prefix"] != "s3cr3t-value" {
		t.Fatal("Resolved does not reveal the value")
	}
}

// A plugin's own templates (${topic}, ${key}) are not placeholders: they pass through, also
// next to a real placeholder in the same value.
func TestTemplatesPassThrough(t *testing.T) {
	p, err := config.OpenBytes("p.yaml", []byte("log:\n  dir: /x\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      topic.prefix: ${topic}-${env:BAD_KEYS}-${key}\n"), lookup, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Connectors[0].Resolved()["topic.prefix"]; got != "${topic}-s3cr3t-value-${key}" {
		t.Fatalf("resolved to %q", got)
	}
}
