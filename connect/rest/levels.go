package rest

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Levels holds the log level of each named logger, changeable at run time through
// /admin/loggers (Kafka Connect's dynamic log levels). A logger's name comes from the
// attributes its slog.Logger was given with With: "component" (e.g. "wal", "rest") or
// "connector" (named "connector.<name>"); all others are "root". A name without its own level
// takes its nearest dotted parent's, then root's.
//
// Wrap the process's handler with Handler:
//
//	levels := rest.NewLevels(slog.LevelInfo)
//	logger := slog.New(levels.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug - 4})))
type Levels struct {
	mu      sync.Mutex
	set     map[string]levelSetting // explicitly set levels; "root" always
	version atomic.Int64            // bumped at every change
}

type levelSetting struct {
	level    slog.Level
	modified time.Time // zero for the initial root level
}

// NewLevels returns a registry whose root level is root.
func NewLevels(root slog.Level) *Levels {
	return &Levels{set: map[string]levelSetting{"root": {level: root}}}
}

// Log4j's level names, as Kafka Connect shows them, and their slog levels.
var levelNames = []struct {
	name  string
	level slog.Level
}{
	{"OFF", slog.Level(1 << 20)},
	{"FATAL", slog.LevelError + 4},
	{"ERROR", slog.LevelError},
	{"WARN", slog.LevelWarn},
	{"INFO", slog.LevelInfo},
	{"DEBUG", slog.LevelDebug},
	{"TRACE", slog.LevelDebug - 4},
}

func levelName(l slog.Level) string {
	for _, n := range levelNames {
		if l >= n.level {
			return n.name
		}
	}
	return "TRACE"
}

func parseLevel(s string) (slog.Level, bool) {
	for _, n := range levelNames {
		if strings.EqualFold(s, n.name) {
			return n.level, true
		}
	}
	return 0, false
}

// effective returns the level of name.
func (l *Levels) effective(name string) slog.Level {
	l.mu.Lock()
	defer l.mu.Unlock()
	for n := name; ; {
		if s, ok := l.set[n]; ok {
			return s.level
		}
		i := strings.LastIndexByte(n, '.')
		if i < 0 {
			return l.set["root"].level
		}
		n = n[:i]
	}
}

// Set sets the level of name and of every logger below it that had its own level, and returns
// the names affected, sorted.
func (l *Levels) Set(name string, level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	affected := []string{name}
	for n := range l.set {
		if n != name && (name == "root" || strings.HasPrefix(n, name+".")) {
			l.set[n] = levelSetting{level: level, modified: now}
			affected = append(affected, n)
		}
	}
	l.set[name] = levelSetting{level: level, modified: now}
	l.version.Add(1)
	sort.Strings(affected)
	return affected
}

// loggerInfo is one logger of GET /admin/loggers.
type loggerInfo struct {
	Level        string `json:"level"`
	LastModified *int64 `json:"last_modified,omitempty"`
}

func (l *Levels) all() map[string]loggerInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]loggerInfo, len(l.set))
	for n, s := range l.set {
		out[n] = s.info()
	}
	return out
}

func (s levelSetting) info() loggerInfo {
	li := loggerInfo{Level: levelName(s.level)}
	if !s.modified.IsZero() {
		ms := s.modified.UnixMilli()
		li.LastModified = &ms
	}
	return li
}

// get returns a logger's own setting, or its effective level when it has none.
func (l *Levels) get(name string) loggerInfo {
	l.mu.Lock()
	s, ok := l.set[name]
	l.mu.Unlock()
	if ok {
		return s.info()
	}
	return loggerInfo{Level: levelName(l.effective(name))}
}

// Handler wraps h so that records below their logger's level are dropped. h's own level
// should let everything through (e.g. slog.LevelDebug - 4).
func (l *Levels) Handler(h slog.Handler) slog.Handler {
	return &levelHandler{levels: l, next: h, name: "root"}
}

type levelHandler struct {
	levels *Levels
	next   slog.Handler
	name   string
	cache  atomic.Pointer[cachedLevel]
}

type cachedLevel struct {
	version int64
	level   slog.Level
}

func (h *levelHandler) level() slog.Level {
	v := h.levels.version.Load()
	if c := h.cache.Load(); c != nil && c.version == v {
		return c.level
	}
	lv := h.levels.effective(h.name)
	h.cache.Store(&cachedLevel{version: v, level: lv})
	return lv
}

func (h *levelHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= h.level() && h.next.Enabled(ctx, lv)
}

func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.next.Handle(ctx, r)
}

func (h *levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	name := h.name
	for _, a := range attrs {
		switch a.Key {
		case "component":
			name = a.Value.String()
		case "connector":
			name = fmt.Sprintf("connector.%s", a.Value.String())
		}
	}
	return &levelHandler{levels: h.levels, next: h.next.WithAttrs(attrs), name: name}
}

func (h *levelHandler) WithGroup(g string) slog.Handler {
	return &levelHandler{levels: h.levels, next: h.next.WithGroup(g), name: h.name}
}
