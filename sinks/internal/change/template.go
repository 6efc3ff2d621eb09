package change

import (
	"fmt"
	"strings"
)

// Template is a name template with ${...} placeholders.
type Template struct {
	parts []tmplPart
}

type tmplPart struct {
	lit string
	ph  string // placeholder name; "" for a literal
}

// ParseTemplate parses s; allowed lists the placeholders it may use (a name ending in "."
// allows every placeholder with that prefix, e.g. "key." for ${key.id}).
func ParseTemplate(s string, allowed ...string) (Template, error) {
	var t Template
	for len(s) > 0 {
		i := strings.Index(s, "${")
		if i < 0 {
			t.parts = append(t.parts, tmplPart{lit: s})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, tmplPart{lit: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return t, fmt.Errorf("unclosed placeholder in %q", s)
		}
		name := s[i+2 : i+j]
		ok := false
		for _, a := range allowed {
			if strings.HasSuffix(a, ".") {
				ok = ok || strings.HasPrefix(name, a) && len(name) > len(a)
			} else {
				ok = ok || name == a
			}
		}
		if !ok {
			return t, fmt.Errorf("unknown placeholder ${%s}; use %s", name, placeholderList(allowed))
		}
		t.parts = append(t.parts, tmplPart{ph: name})
		s = s[i+j+1:]
	}
	return t, nil
}

func placeholderList(allowed []string) string {
	out := make([]string, len(allowed))
	for i, a := range allowed {
		if strings.HasSuffix(a, ".") {
			out[i] = "${" + a + "<column>}"
		} else {
			out[i] = "${" + a + "}"
		}
	}
	return strings.Join(out, ", ")
}

// Static reports whether the template has no placeholder.
func (t Template) Static() bool {
	for _, p := range t.parts {
		if p.ph != "" {
			return false
		}
	}
	return true
}

// Render appends the template's rendering; value supplies each placeholder.
func (t Template) Render(dst []byte, value func(dst []byte, ph string) ([]byte, error)) ([]byte, error) {
	var err error
	for _, p := range t.parts {
		if p.ph == "" {
			dst = append(dst, p.lit...)
			continue
		}
		if dst, err = value(dst, p.ph); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
