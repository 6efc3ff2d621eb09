package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/sluice-cdc/sluice/connect"
)

// The "rest" section configures the admin API:
//
//	rest:
//	  listeners: [http://127.0.0.1:8083]   # default; https://... needs tls; [] turns the API off
//	  auth:
//	    token: ${env:SLUICE_TOKEN}          # optional bearer token (also the HTTP Basic password)
//	  tls:
//	    cert: /etc/sluice/tls.crt
//	    key: /etc/sluice/tls.key

// DefaultListener is where the admin API listens when the pipeline does not say.
const DefaultListener = "http://127.0.0.1:8083"

// Listener is one address the admin API listens on.
type Listener struct {
	// TLS is true for https listeners.
	TLS bool
	// Addr is host:port.
	Addr string
}

func (l Listener) String() string {
	if l.TLS {
		return "https://" + l.Addr
	}
	return "http://" + l.Addr
}

// RESTSettings are the admin API's settings (the "rest" section).
type RESTSettings struct {
	// Listeners are the addresses to listen on; empty turns the API off.
	Listeners []Listener
	// Token is the resolved bearer token; empty when the API needs none.
	Token Secret
	// TokenWritten is the token as written (a placeholder, or the value written inline).
	TokenWritten string
	// TLSCert and TLSKey are PEM files, made absolute; both set or neither.
	TLSCert, TLSKey string

	pos  Pos
	keys map[string]Pos
}

// Public reports whether a listener binds to an address other than loopback.
func (r *RESTSettings) Public() bool {
	for _, l := range r.Listeners {
		host, _, _ := net.SplitHostPort(l.Addr)
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return true
		}
	}
	return false
}

var restKeys = []string{"listeners", "auth", "tls"}

func (d *decoder) rest(n ast.Node, r *RESTSettings) {
	r.keys = map[string]Pos{}
	entries, ok := d.mapping(n, "rest")
	if !ok {
		return
	}
	for _, e := range entries {
		path := "rest." + e.key
		r.keys[e.key] = d.pos(e.keyN)
		switch e.key {
		case "listeners":
			items, ok := d.list(e.value, path)
			if !ok {
				continue
			}
			r.Listeners = []Listener{}
			for i, item := range items {
				l, err := parseListener(item)
				if err != nil {
					d.errorf(e.value, fmt.Sprintf("%s[%d]", path, i), "%v", err)
					continue
				}
				r.Listeners = append(r.Listeners, l)
			}
		case "auth":
			aentries, ok := d.mapping(e.value, path)
			if !ok {
				continue
			}
			for _, ae := range aentries {
				apath := path + "." + ae.key
				r.keys["auth."+ae.key] = d.pos(ae.keyN)
				if ae.key != "token" {
					d.unknown(ae.keyN, path, ae.key, []string{"token"})
					continue
				}
				v, ok := d.str(ae.value, ae.keyN, apath)
				if !ok {
					continue
				}
				if err := checkPlaceholders(v); err != nil {
					d.errorf(ae.value, apath, "%v", err)
					continue
				}
				if strings.TrimSpace(v) == "" {
					d.errorf(ae.value, apath, "must not be empty (leave auth out for an API without a token)")
					continue
				}
				r.TokenWritten = v
			}
		case "tls":
			tentries, ok := d.mapping(e.value, path)
			if !ok {
				continue
			}
			for _, te := range tentries {
				tpath := path + "." + te.key
				r.keys["tls."+te.key] = d.pos(te.keyN)
				v, ok := d.str(te.value, te.keyN, tpath)
				if !ok {
					continue
				}
				abs, err := filepath.Abs(v)
				if err != nil || strings.TrimSpace(v) == "" {
					d.errorf(te.value, tpath, "must be a file path")
					continue
				}
				switch te.key {
				case "cert":
					r.TLSCert = abs
				case "key":
					r.TLSKey = abs
				default:
					d.unknown(te.keyN, path, te.key, []string{"cert", "key"})
				}
			}
		default:
			d.unknown(e.keyN, "rest", e.key, restKeys)
		}
	}
}

func parseListener(s string) (Listener, error) {
	var l Listener
	rest := s
	switch {
	case strings.HasPrefix(s, "http://"):
		rest = strings.TrimPrefix(s, "http://")
	case strings.HasPrefix(s, "https://"):
		l.TLS, rest = true, strings.TrimPrefix(s, "https://")
	case strings.Contains(s, "://"):
		return l, fmt.Errorf("must be http://host:port or https://host:port (got %q)", s)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return l, fmt.Errorf("must be http://host:port or https://host:port (got %q)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return l, fmt.Errorf("port must be 0..65535 (got %q)", port)
	}
	l.Addr = net.JoinHostPort(host, port)
	return l, nil
}

// finishREST applies the defaults and checks what spans keys.
func (r *RESTSettings) finish() Errors {
	var errs Errors
	if r.Listeners == nil {
		l, _ := parseListener(DefaultListener)
		r.Listeners = []Listener{l}
	}
	if (r.TLSCert == "") != (r.TLSKey == "") {
		p := r.keys["tls"]
		errs = append(errs, Error{File: p.File, Line: p.Line, Col: p.Col, Path: "rest.tls", Msg: "set both cert and key"})
	}
	for _, l := range r.Listeners {
		if l.TLS && r.TLSCert == "" {
			p := r.keys["listeners"]
			errs = append(errs, Error{File: p.File, Line: p.Line, Col: p.Col, Path: "rest.listeners", Msg: fmt.Sprintf("%s needs rest.tls.cert and rest.tls.key", l)})
		}
	}
	for key, path := range map[string]string{"tls.cert": r.TLSCert, "tls.key": r.TLSKey} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			p := r.keys[key]
			errs = append(errs, Error{File: p.File, Line: p.Line, Col: p.Col, Path: "rest." + key, Msg: fmt.Sprintf("cannot read %s: %v", path, unwrapPathError(err))})
		}
	}
	return errs
}

// resolveToken resolves the token's placeholders.
func (r *RESTSettings) resolveToken(res *resolver) Errors {
	if r.TokenWritten == "" {
		return nil
	}
	v, _, err := res.resolve(r.TokenWritten)
	if err != nil {
		p := r.keys["auth.token"]
		return Errors{{File: p.File, Line: p.Line, Col: p.Col, Path: "rest.auth.token", Msg: err.Error()}}
	}
	if strings.TrimSpace(v) == "" {
		p := r.keys["auth.token"]
		return Errors{{File: p.File, Line: p.Line, Col: p.Col, Path: "rest.auth.token", Msg: "resolves to an empty value"}}
	}
	r.Token = Secret(v)
	return nil
}

// ResolveConfig substitutes the placeholders of one connector configuration, as the admin
// API receives it, reading environment variables through env (nil: the process environment).
// Values without an ${env:...} or ${file:...} placeholder are kept as they are, so that a
// sink's templates (${topic}, ${key}) pass through. Each problem names its key and the
// placeholder, never a value.
func ResolveConfig(config map[string]string, env Env) (map[string]string, []connect.FieldError) {
	if env == nil {
		env = os.LookupEnv
	}
	r := &resolver{env: env, files: map[string]map[string]string{}, errs: map[string]error{}}
	out := make(map[string]string, len(config))
	var errs []connect.FieldError
	for k, v := range config {
		if !strings.Contains(v, "${env:") && !strings.Contains(v, "${file:") {
			out[k] = v
			continue
		}
		res, _, err := r.resolve(v)
		if err != nil {
			errs = append(errs, connect.FieldError{Key: k, Message: err.Error()})
			continue
		}
		out[k] = res
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Key < errs[j].Key })
	return out, errs
}
