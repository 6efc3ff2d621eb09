package config

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Placeholders in connector config values:
//
//	${env:NAME}          the environment variable NAME (must be set)
//	${file:/path:key}    key of the properties file at /path (Kafka's FileConfigProvider
//	                     format: key=value or key: value lines, # and ! comments); a relative
//	                     path is relative to the working directory
//
// A value may mix text and placeholders ("jdbc:mysql://${env:DB_HOST}:3306"). Resolved values
// are secrets: they are never shown, in errors or elsewhere.

// Secret is a resolved placeholder value. It prints as "****".
type Secret string

func (s Secret) String() string   { return "****" }
func (s Secret) GoString() string { return "****" }

// MarshalText keeps secrets out of JSON and YAML renderings.
func (s Secret) MarshalText() ([]byte, error) { return []byte("****"), nil }

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

type placeholder struct {
	start, end int // byte range of ${...} in the value
	provider   string
	path, key  string // file: path and key; env: key is the variable
}

// scan finds the placeholders of a value.
func scan(v string) ([]placeholder, error) {
	var out []placeholder
	for i := 0; i < len(v); {
		j := strings.Index(v[i:], "${")
		if j < 0 {
			break
		}
		start := i + j
		end := strings.IndexByte(v[start:], '}')
		if end < 0 {
			return nil, fmt.Errorf("unterminated placeholder %q: want ${env:NAME} or ${file:/path:key}", v[start:])
		}
		end += start + 1
		body := v[start+2 : end-1]
		ph := placeholder{start: start, end: end}
		provider, rest, _ := strings.Cut(body, ":")
		switch provider {
		case "env":
			if !validEnvName(rest) {
				return nil, fmt.Errorf("bad placeholder %q: want ${env:NAME} with NAME of A-Z a-z 0-9 _", v[start:end])
			}
			ph.provider, ph.key = "env", rest
		case "file":
			k := strings.LastIndexByte(rest, ':')
			if k <= 0 || k == len(rest)-1 {
				return nil, fmt.Errorf("bad placeholder %q: want ${file:/path:key}", v[start:end])
			}
			ph.provider, ph.path, ph.key = "file", rest[:k], rest[k+1:]
		default:
			if !strings.Contains(body, ":") {
				// not a placeholder: a plugin's own template such as ${topic} or ${key}
				i = end
				continue
			}
			return nil, fmt.Errorf("unknown placeholder %q: want ${env:NAME} or ${file:/path:key}", v[start:end])
		}
		out = append(out, ph)
		i = end
	}
	return out, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func checkPlaceholders(v string) error {
	_, err := scan(v)
	return err
}

// Env looks up environment variables; os.LookupEnv in production.
type Env func(name string) (string, bool)

// resolver substitutes placeholders, caching properties files.
type resolver struct {
	env   Env
	files map[string]map[string]string
	errs  map[string]error
}

func (r *resolver) resolve(v string) (string, bool, error) {
	phs, err := scan(v)
	if err != nil || len(phs) == 0 {
		return v, false, err
	}
	var b strings.Builder
	last := 0
	for _, ph := range phs {
		b.WriteString(v[last:ph.start])
		last = ph.end
		switch ph.provider {
		case "env":
			val, ok := r.env(ph.key)
			if !ok {
				return "", true, fmt.Errorf("environment variable %s is not set (from ${env:%s})", ph.key, ph.key)
			}
			b.WriteString(val)
		case "file":
			props, err := r.file(ph.path)
			if err != nil {
				return "", true, fmt.Errorf("${file:%s:%s}: %w", ph.path, ph.key, err)
			}
			val, ok := props[ph.key]
			if !ok {
				return "", true, fmt.Errorf("${file:%s:%s}: the file has no key %q", ph.path, ph.key, ph.key)
			}
			b.WriteString(val)
		}
	}
	b.WriteString(v[last:])
	return b.String(), true, nil
}

func (r *resolver) file(path string) (map[string]string, error) {
	if p, ok := r.files[path]; ok {
		return p, nil
	}
	if err, ok := r.errs[path]; ok {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		err = fmt.Errorf("cannot read %s: %w", path, unwrapPathError(err))
		r.errs[path] = err
		return nil, err
	}
	props := parseProperties(data)
	r.files[path] = props
	return props, nil
}

// parseProperties reads the simple form of Java properties files: key=value or key: value per
// line, blank lines and lines starting with # or ! ignored, surrounding spaces trimmed.
func parseProperties(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		i := strings.IndexAny(line, "=:")
		if i < 0 {
			out[line] = ""
			continue
		}
		out[strings.TrimSpace(line[:i])] = strings.TrimSpace(line[i+1:])
	}
	return out
}

// Resolve substitutes the placeholders of every connector's config values, reading
// environment variables through env (nil: the process environment). It reports every value
// that cannot be resolved, naming the placeholder, never a value.
func (p *Pipeline) Resolve(env Env) error {
	if env == nil {
		env = os.LookupEnv
	}
	r := &resolver{env: env, files: map[string]map[string]string{}, errs: map[string]error{}}
	errs := p.REST.resolveToken(r)
	for _, c := range p.Connectors {
		c.resolved = make(map[string]Secret, len(c.Config))
		c.secret = map[string]bool{}
		for k, v := range c.Config {
			if c.bad[k] {
				continue
			}
			pos := c.keys[k]
			out, had, err := r.resolve(v)
			if err != nil {
				errs = append(errs, Error{File: pos.File, Line: pos.Line, Col: pos.Col, Path: c.Path() + ".config." + k, Msg: err.Error()})
				c.bad[k] = true // reported: no "is required" for it later
				continue
			}
			c.resolved[k] = Secret(out)
			if had {
				c.secret[k] = true
			}
		}
	}
	return errs.orNil()
}
