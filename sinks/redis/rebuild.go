package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
)

// Generations. The view lives in a generation: generation 0 writes the keys the template
// renders as they are; generation n > 0 writes them under the prefix <meta>g<n>:. The key
// <meta>live holds the live generation's prefix (absent or "" for generation 0), so a reader
// finds a row as GET(<meta>live) + key. A rebuild writes a fresh generation, then switches
// <meta>live (and <meta>live.gen) in one MULTI, and deletes the old generation's keys a little
// later (rebuild.cleanup.delay.ms), so readers that read the pointer just before can finish.
//
// Each row's version marker is <meta>v:<gen>:<key> (stream entries: <meta>s:<gen>:<len>:<stream
// key>:<row key>), so a generation's keys can be found with SCAN even in generation 0:
// the markers name the rows. A hash row whose version is in its field <meta>version
// (redis.version.storage=field) has no marker key unless it was deleted: generation 0's are
// found by a SCAN of the hashes that hold that field (it names the connector). Other keys sluice keeps under <meta>: live.gen (the live
// generation's number), next.gen (the last number handed out), building (generations being
// rebuilt), cleanup (replaced generations whose keys are still being deleted).

func (s *Sink) metaKey(name string) string { return s.o.meta + name }

// genPrefix is the view keys' prefix in generation gen.
func (s *Sink) genPrefix(gen int) string {
	if gen == 0 {
		return ""
	}
	return s.o.meta + "g" + strconv.Itoa(gen) + ":"
}

// setGeneration makes s write generation gen; what it remembered of another generation's
// markers is dropped, and it takes the generation's owner key at its next write.
func (s *Sink) setGeneration(gen int) {
	if gen != s.gen {
		s.cache.clear()
		s.epoch = 0
		s.dropConn() // it WATCHes the other generation's owner key
	}
	s.gen = gen
	s.prefix = s.genPrefix(gen)
}

// liveGeneration reads the live generation's number (0 when no rebuild ever finished).
func (s *Sink) liveGeneration(ctx context.Context) (int, error) {
	v, err := s.rdb.Get(ctx, s.metaKey("live.gen")).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read live generation: %w", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, connect.Permanentf("read live generation: %s holds %q, not a generation number", s.metaKey("live.gen"), v)
	}
	return n, nil
}

// rebuildState marks a sink returned by BeginRebuild.
type rebuildState struct {
	live *Sink
}

// BeginRebuild returns a sink that writes a fresh generation while s keeps writing the live
// one. Generations of rebuilds that died before finishing are queued for cleanup.
func (s *Sink) BeginRebuild(ctx context.Context) (connect.Sink, error) {
	var n int
	for {
		v, err := s.rdb.Incr(ctx, s.metaKey("next.gen")).Result()
		if err != nil {
			return nil, fmt.Errorf("begin rebuild: %w", err)
		}
		if int(v) > s.gen {
			n = int(v)
			break
		}
		if err := s.rdb.Set(ctx, s.metaKey("next.gen"), s.gen, 0).Err(); err != nil {
			return nil, fmt.Errorf("begin rebuild: %w", err)
		}
	}
	stale, err := s.rdb.SMembers(ctx, s.metaKey("building")).Result()
	if err != nil {
		return nil, fmt.Errorf("begin rebuild: %w", err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		for _, g := range stale {
			p.SMove(ctx, s.metaKey("building"), s.metaKey("cleanup"), g)
		}
		p.SAdd(ctx, s.metaKey("building"), n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("begin rebuild: %w", err)
	}
	if len(stale) > 0 {
		s.log.Info("generations of unfinished rebuilds queued for cleanup", "generations", stale)
		if err := s.resumeCleanup(ctx); err != nil {
			return nil, fmt.Errorf("begin rebuild: %w", err)
		}
	}
	r := newSink(s.o, s.log.With("rebuild_generation", n))
	r.rdb = s.rdb
	r.noGuard = s.noGuard
	r.rebuild = &rebuildState{live: s}
	r.setGeneration(n)
	s.log.Info("rebuild started", "generation", n, "prefix", r.prefix)
	return r, nil
}

func (s *Sink) rebuilt(rebuilt connect.Sink) (*Sink, error) {
	r, ok := rebuilt.(*Sink)
	if !ok || r.rebuild == nil || r.rebuild.live != s {
		return nil, fmt.Errorf("rebuild: %T is not a sink this sink's BeginRebuild returned", rebuilt)
	}
	return r, nil
}

// FinishRebuild switches readers and s to the rebuilt generation in one MULTI and queues the
// old generation for cleanup.
func (s *Sink) FinishRebuild(ctx context.Context, rebuilt connect.Sink) error {
	r, err := s.rebuilt(rebuilt)
	if err != nil {
		return err
	}
	old := s.gen
	_, err = s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, s.metaKey("live"), r.prefix, 0)
		p.Set(ctx, s.metaKey("live.gen"), r.gen, 0)
		p.SRem(ctx, s.metaKey("building"), r.gen)
		p.SAdd(ctx, s.metaKey("cleanup"), old)
		return nil
	})
	if err != nil {
		return fmt.Errorf("finish rebuild: switch to generation %d: %w", r.gen, err)
	}
	s.setGeneration(r.gen)
	// r wrote every marker of the generation up to here and writes no more: what it remembers
	// is what s would read
	s.cache, r.cache = r.cache, newVersionCache(r.o.cacheSize)
	s.log.Info("rebuild finished", "generation", r.gen, "prefix", r.prefix, "old_generation", old, "cleanup_delay", s.o.cleanDelay)
	return s.resumeCleanup(ctx)
}

// AbortRebuild deletes the rebuilt generation's keys; the live view is untouched.
func (s *Sink) AbortRebuild(ctx context.Context, rebuilt connect.Sink) error {
	r, err := s.rebuilt(rebuilt)
	if err != nil {
		return err
	}
	c := &cleanupState{gens: []int{r.gen}}
	for !c.done() {
		if err := s.cleanStep(ctx, c); err != nil {
			return fmt.Errorf("abort rebuild: %w", err)
		}
	}
	if err := s.rdb.SRem(ctx, s.metaKey("building"), r.gen).Err(); err != nil {
		return fmt.Errorf("abort rebuild: %w", err)
	}
	if err := s.rdb.Del(ctx, s.metaKey("owner:"+strconv.Itoa(r.gen))).Err(); err != nil {
		return fmt.Errorf("abort rebuild: %w", err)
	}
	s.log.Info("rebuild aborted", "generation", r.gen)
	return nil
}

// cleanupState is where the deletion of replaced generations stands.
type cleanupState struct {
	gens   []int
	phase  int // 0: view keys under the generation's prefix, 1: row markers, 2: stream markers, 3: generation 0's hashes with a version field
	cursor uint64
}

func (c *cleanupState) done() bool { return len(c.gens) == 0 }

// resumeCleanup loads the generations waiting for cleanup; it starts after the delay.
func (s *Sink) resumeCleanup(ctx context.Context) error {
	members, err := s.rdb.SMembers(ctx, s.metaKey("cleanup")).Result()
	if err != nil {
		return fmt.Errorf("read generations to clean up: %w", err)
	}
	var gens []int
	for _, m := range members {
		g, err := strconv.Atoi(m)
		if err != nil || g == s.gen {
			continue
		}
		gens = append(gens, g)
	}
	sort.Ints(gens)
	if len(gens) == 0 {
		s.cleanup = nil
		return nil
	}
	s.cleanup = &cleanupState{gens: gens}
	s.cleanAt = time.Now().Add(s.o.cleanDelay)
	return nil
}

// runCleanup advances the cleanup by up to rounds SCAN steps (all of it when rounds < 0).
func (s *Sink) runCleanup(ctx context.Context, rounds int) error {
	for i := 0; s.cleanup != nil && (rounds < 0 || i < rounds); i++ {
		if err := s.cleanStep(ctx, s.cleanup); err != nil {
			return err
		}
		if s.cleanup.done() {
			s.cleanup = nil
		}
	}
	return nil
}

// globEscape escapes the characters SCAN MATCH treats specially.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// cleanStep deletes one SCAN page of the first generation's keys.
func (s *Sink) cleanStep(ctx context.Context, c *cleanupState) error {
	g := c.gens[0]
	gs := strconv.Itoa(g)
	var pattern, markerPrefix string
	switch c.phase {
	case 0:
		if g == 0 {
			c.phase = 1
			return nil
		}
		pattern = globEscape(s.genPrefix(g)) + "*"
	case 1:
		markerPrefix = s.metaKey("v:" + gs + ":")
		pattern = globEscape(markerPrefix) + "*"
	case 2:
		markerPrefix = s.metaKey("s:" + gs + ":")
		pattern = globEscape(markerPrefix) + "*"
	default:
		if g != 0 || s.o.typ != TypeHash {
			c.phase = 4
			return s.cleanDone(ctx, c)
		}
	}
	var keys []string
	var cursor uint64
	var err error
	if c.phase == 3 {
		keys, cursor, err = s.versionedHashes(ctx, c.cursor)
	} else {
		keys, cursor, err = s.rdb.Scan(ctx, c.cursor, pattern, 1000).Result()
	}
	if err != nil {
		return fmt.Errorf("clean up generation %d: %w", g, err)
	}
	del := keys
	if g == 0 && (c.phase == 1 || c.phase == 2) {
		// generation 0's view keys have no prefix: the markers name them
		del = make([]string, 0, 2*len(keys))
		for _, k := range keys {
			del = append(del, k)
			name := strings.TrimPrefix(k, markerPrefix)
			if c.phase == 2 {
				name = streamOfMarker(name)
			}
			if name != "" {
				del = append(del, name)
			}
		}
	}
	if len(del) > 0 {
		if err := s.rdb.Unlink(ctx, del...).Err(); err != nil {
			return fmt.Errorf("clean up generation %d: %w", g, err)
		}
	}
	c.cursor = cursor
	if cursor != 0 {
		return nil
	}
	c.phase++
	if c.phase <= 3 {
		return nil
	}
	return s.cleanDone(ctx, c)
}

// versionedHashes returns generation 0's rows found by one SCAN page from cursor whose
// versions are in a hash field (redis.version.storage=field: no marker key names them): the
// hashes outside the meta prefix that hold the field, which names this connector.
func (s *Sink) versionedHashes(ctx context.Context, cursor uint64) ([]string, uint64, error) {
	keys, next, err := s.rdb.ScanType(ctx, cursor, "*", 1000, "hash").Result()
	if err != nil {
		return nil, 0, err
	}
	field := s.o.meta + "version"
	p := s.rdb.Pipeline()
	var cand []string
	var has []*goredis.BoolCmd
	for _, k := range keys {
		if strings.HasPrefix(k, s.o.meta) {
			continue // sluice's own keys and rebuilt generations
		}
		cand = append(cand, k)
		has = append(has, p.HExists(ctx, k, field))
	}
	if len(cand) == 0 {
		return nil, next, nil
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, 0, err
	}
	var out []string
	for i, h := range has {
		if h.Val() {
			out = append(out, cand[i])
		}
	}
	return out, next, nil
}

// cleanDone finishes the cleanup of the first generation of c.
func (s *Sink) cleanDone(ctx context.Context, c *cleanupState) error {
	g := c.gens[0]
	gs := strconv.Itoa(g)
	if err := s.rdb.Del(ctx, s.metaKey("owner:"+gs)).Err(); err != nil {
		return fmt.Errorf("clean up generation %d: %w", g, err)
	}
	if err := s.rdb.SRem(ctx, s.metaKey("cleanup"), g).Err(); err != nil {
		return fmt.Errorf("clean up generation %d: %w", g, err)
	}
	s.log.Info("generation replaced by a rebuild deleted", "generation", g)
	c.gens, c.phase = c.gens[1:], 0
	return nil
}

// streamOfMarker returns the stream key a stream marker <len>:<stream key>:<row key> names.
func streamOfMarker(m string) string {
	i := strings.IndexByte(m, ':')
	if i < 0 {
		return ""
	}
	n, err := strconv.Atoi(m[:i])
	if err != nil || i+1+n > len(m) {
		return ""
	}
	return m[i+1 : i+1+n]
}
