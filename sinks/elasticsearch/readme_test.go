package elasticsearch

import (
	"os"
	"strings"
	"testing"
)

// TestREADME: the README section documents every key of the plugin with its default.
func TestREADME(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	all := string(b)
	start, end := strings.Index(all, "### Elasticsearch configuration"), strings.Index(all, "### Redis configuration")
	if start < 0 || end < start {
		t.Fatal("README has no ### Elasticsearch configuration section")
	}
	readme := all[start:end]
	for _, k := range Plugin().Config {
		if k.Ignored {
			if !strings.Contains(all, "`"+k.Name+"`") {
				t.Errorf("README does not list the ignored key %s", k.Name)
			}
			continue
		}
		row := "| `" + k.Name + "` | " + k.Type.String() + " | "
		i := strings.Index(readme, row)
		if i < 0 {
			t.Errorf("README has no row for %s (%s)", k.Name, k.Type)
			continue
		}
		line := readme[i : i+strings.IndexByte(readme[i:], '\n')]
		if k.HasDefault && k.Default != "" && !strings.Contains(line, "| `"+k.Default+"` |") {
			t.Errorf("README row of %s lacks its default %q: %s", k.Name, k.Default, line)
		}
		if !strings.Contains(line, strings.ReplaceAll(k.Doc, "|", "\\|")) {
			t.Errorf("README row of %s does not carry its doc", k.Name)
		}
	}
}
