package rest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
)

// Listener is an address the API listens on.
type Listener struct {
	Addr string // host:port; port 0 picks a free one
	TLS  bool
}

// Options configure a Server.
type Options struct {
	// Runtime is what the API manages. Required.
	Runtime *runtime.Runtime
	// Listeners are where Listen binds; none: the API only serves through Handler.
	Listeners []Listener
	// TLSCertFile and TLSKeyFile are PEM files for the TLS listeners.
	TLSCertFile, TLSKeyFile string
	// Token, when set, must come with every request except GET /health: as a bearer token
	// (Authorization: Bearer <token>) or as the password of HTTP Basic authentication (any
	// user name), which is what Kafka Connect tooling sends.
	Token string
	// Resolve substitutes placeholders in submitted configurations (the runtime's
	// Options.Resolve); the API uses it to keep the resolved values out of its answers.
	Resolve func(map[string]string) (map[string]string, []connect.FieldError)
	// Logger receives request logs (at Debug) and errors; nil discards them.
	Logger *slog.Logger
	// Levels is the log level registry behind /admin/loggers; nil serves only a fixed root.
	Levels *Levels
	// Metrics serves /metrics; nil answers 404.
	Metrics *Metrics
	// Version and Commit are reported by GET /; ClusterID as kafka_cluster_id.
	Version, Commit, ClusterID string
	// Ready reports whether the process finished starting (GET /health); nil: always.
	Ready func() bool
	// MaxBodyBytes bounds request bodies (default 1 MiB).
	MaxBodyBytes int64
	// ReadHeaderTimeout and ReadTimeout bound how long a client may take to send its headers
	// and its whole request (defaults 10s and 60s).
	ReadHeaderTimeout, ReadTimeout time.Duration
	// MaxWait bounds the timeout of a wait request (default 5m).
	MaxWait time.Duration
}

// Server is the admin API. Build it with New, bind with Listen, serve with Run.
type Server struct {
	opts   Options
	rt     *runtime.Runtime
	logger *slog.Logger
	routes []route
	srv    *http.Server

	mu  sync.Mutex
	lns []net.Listener
}

// New checks opts and builds the server. It binds nothing and starts no goroutine.
func New(opts Options) (*Server, error) {
	if opts.Runtime == nil {
		return nil, errors.New("rest: Options.Runtime is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 60 * time.Second
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 5 * time.Minute
	}
	if opts.Levels == nil {
		opts.Levels = NewLevels(slog.LevelInfo)
	}
	s := &Server{opts: opts, rt: opts.Runtime, logger: opts.Logger}
	s.routes = s.buildRoutes()
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	if len(opts.Listeners) > 0 {
		needTLS := false
		for _, l := range opts.Listeners {
			needTLS = needTLS || l.TLS
		}
		if needTLS {
			cert, err := tls.LoadX509KeyPair(opts.TLSCertFile, opts.TLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("rest: load TLS certificate: %w", err)
			}
			s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
	}
	return s, nil
}

// Listen binds every listener; an address in use fails here, at start.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.opts.Listeners {
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			for _, o := range s.lns {
				o.Close()
			}
			s.lns = nil
			return fmt.Errorf("rest: listen on %s: %w", l.Addr, err)
		}
		if l.TLS {
			ln = tls.NewListener(ln, s.srv.TLSConfig)
		}
		s.lns = append(s.lns, ln)
	}
	return nil
}

// URLs returns the base URL of every bound listener.
func (s *Server) URLs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.lns))
	for i, ln := range s.lns {
		scheme := "http"
		if s.opts.Listeners[i].TLS {
			scheme = "https"
		}
		out[i] = scheme + "://" + ln.Addr().String()
	}
	return out
}

// Run serves the bound listeners until ctx is cancelled, then shuts down: requests in flight
// (a long wait included) get up to 5 seconds to finish. It returns after every goroutine it
// started has exited.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	lns := s.lns
	s.mu.Unlock()
	if len(lns) == 0 {
		<-ctx.Done()
		return nil
	}
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	g, gctx := errgroup.WithContext(ctx)
	for _, ln := range lns {
		g.Go(func() error {
			if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("rest: serve %s: %w", ln.Addr(), err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(sctx); err != nil {
			s.srv.Close()
		}
		return nil
	})
	return g.Wait()
}

// route is one endpoint.
type route struct {
	method  string
	pattern []string // literal segments, or "{name}" for a parameter
	handle  func(w http.ResponseWriter, r *http.Request, p params) error
	// public routes need no token.
	public bool
}

// params are a request's path parameters.
type params map[string]string

// Handler returns the API as an http.Handler (authentication, limits and error rendering
// included).
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serve)
}

// scrubKey is the context key of a request's secret values (see scrub).
type scrubKey struct{}

// scrub is the values a request revealed (secrets written inline, resolved placeholders):
// they are replaced by "****" in anything the response carries.
type scrub struct{ values []string }

func (sc *scrub) add(v string) {
	if len(v) >= 3 {
		sc.values = append(sc.values, v)
	}
}

func (sc *scrub) apply(b []byte) []byte {
	if sc == nil {
		return b
	}
	// Longest first, so that a secret containing another is replaced whole.
	sort.Slice(sc.values, func(i, j int) bool { return len(sc.values[i]) > len(sc.values[j]) })
	for _, v := range sc.values {
		for _, form := range []string{v, jsonEscaped(v)} {
			if form != "" {
				b = bytes.ReplaceAll(b, []byte(form), []byte(connect.Redacted))
			}
		}
	}
	return b
}

func jsonEscaped(v string) string {
	b, _ := json.Marshal(v)
	s := string(b[1 : len(b)-1])
	if s == v {
		return ""
	}
	return s
}

func scrubOf(r *http.Request) *scrub {
	sc, _ := r.Context().Value(scrubKey{}).(*scrub)
	return sc
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	sc := &scrub{}
	r = r.WithContext(context.WithValue(r.Context(), scrubKey{}, sc))
	defer func() {
		if v := recover(); v != nil {
			s.logger.Error("rest: handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if !rec.wrote {
				writeError(rec, r, errorf(http.StatusInternalServerError, "internal error"))
			}
		}
		s.logger.Debug("rest request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "took", time.Since(start).Round(time.Microsecond))
	}()
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	rt, p, aerr := s.match(r)
	if aerr != nil {
		writeError(rec, r, aerr)
		return
	}
	if !rt.public && !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="sluice", Basic realm="sluice"`)
		writeError(rec, r, errorf(http.StatusUnauthorized, "authentication required: send the API token as a bearer token (Authorization: Bearer <token>) or as the HTTP Basic password"))
		return
	}
	r.Body = http.MaxBytesReader(rec, r.Body, s.opts.MaxBodyBytes)
	if err := rt.handle(rec, r, p); err != nil {
		writeError(rec, r, fromRuntime(err))
	}
}

// authorized checks the token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.opts.Token == "" {
		return true
	}
	var got string
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		got = strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	} else if _, pw, ok := r.BasicAuth(); ok {
		got = pw
	} else {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// match finds the route of a request. Path segments are unescaped one by one, so an encoded
// slash stays inside its segment; "." and ".." segments and empty segments are refused.
func (s *Server) match(r *http.Request) (route, params, *apiError) {
	raw := r.URL.EscapedPath()
	if raw != "/" {
		raw = strings.TrimSuffix(raw, "/")
	}
	var segs []string
	if raw != "/" {
		for i, seg := range strings.Split(strings.TrimPrefix(raw, "/"), "/") {
			u, err := url.PathUnescape(seg)
			if err != nil {
				return route{}, nil, badRequest("path segment %d is not valid: %v", i+1, err)
			}
			if u == "" || u == "." || u == ".." {
				return route{}, nil, badRequest("path %q has an empty, \".\" or \"..\" segment", r.URL.Path)
			}
			if strings.ContainsAny(u, "\x00\n\r") {
				return route{}, nil, badRequest("path segment %d contains control characters", i+1)
			}
			segs = append(segs, u)
		}
	}
	var allowed []string
	for _, rt := range s.routes {
		p, ok := matchPattern(rt.pattern, segs)
		if !ok {
			continue
		}
		if rt.method == r.Method {
			return rt, p, nil
		}
		allowed = append(allowed, rt.method)
	}
	if len(allowed) > 0 {
		return route{}, nil, errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", "))
	}
	return route{}, nil, notFound("no endpoint %s %s", r.Method, r.URL.Path)
}

func matchPattern(pattern, segs []string) (params, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	var p params
	for i, seg := range pattern {
		if strings.HasPrefix(seg, "{") {
			if p == nil {
				p = params{}
			}
			p[strings.Trim(seg, "{}")] = segs[i]
			continue
		}
		if seg != segs[i] {
			return nil, false
		}
	}
	return p, true
}

// statusRecorder remembers the status written.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// writeJSON answers status with v as JSON, secrets of the request scrubbed.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	b = scrubOf(r).apply(b)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// writeEmpty answers status without a body.
func writeEmpty(w http.ResponseWriter, status int) error {
	w.WriteHeader(status)
	return nil
}

// writeError answers Kafka Connect's error body.
func writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	_ = writeJSON(w, r, e.Status, map[string]any{"error_code": e.Status, "message": e.Message})
}
