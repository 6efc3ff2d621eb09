package elasticsearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
)

// Indices. The sink writes to the index name the `index` template renders, which it creates as
// an alias of a versioned index <name>_v<n>. A rebuild writes a fresh <name>_v<n+1> and then
// moves the alias to it and drops the old index in one atomic _aliases call, so readers that
// query <name> see the old view until the new one is complete. An index named <name> that
// already exists (created by someone else, or an alias made by hand) is written as it is; a
// rebuild replaces it by the alias.

// metaKey is the mappings _meta entry that marks the indices a sink created.
const metaKey = "sluice"

type indexMeta struct {
	Connector  string `json:"connector"`
	Alias      string `json:"alias"`
	Generation int    `json:"generation"`
}

// ensureIndex returns where writes for the rendered index name go, creating the index on first
// use.
func (s *Sink) ensureIndex(ctx context.Context, name string) (string, error) {
	if t, ok := s.indices[name]; ok {
		return t, nil
	}
	if s.rebuild != nil {
		idx, err := s.createIndex(ctx, name, false)
		if err != nil {
			return "", err
		}
		s.indices[name] = idx
		return idx, nil
	}
	exists, err := s.exists(ctx, name)
	if err != nil {
		return "", err
	}
	if !exists {
		if _, err := s.createIndex(ctx, name, true); err != nil {
			return "", err
		}
	}
	s.indices[name] = name
	return name, nil
}

// exists reports whether an index or alias called name exists.
func (s *Sink) exists(ctx context.Context, name string) (bool, error) {
	_, err := s.c.do(ctx, "HEAD", "/"+url.PathEscape(name), nil)
	switch {
	case err == nil:
		return true, nil
	case statusOf(err) == 404:
		return false, nil
	}
	return false, fmt.Errorf("check index %s: %w", name, err)
}

// createIndex creates the next versioned index of alias (with the alias when withAlias) and
// returns its name. Another sink creating the same alias at the same time is not an error.
func (s *Sink) createIndex(ctx context.Context, alias string, withAlias bool) (string, error) {
	gen, err := s.lastGeneration(ctx, alias)
	if err != nil {
		return "", err
	}
	for tries := 0; tries < 20; tries++ {
		gen++
		idx := alias + "_v" + strconv.Itoa(gen)
		body, err := s.createBody(alias, gen, withAlias, s.rebuild != nil)
		if err != nil {
			return "", err
		}
		_, err = s.c.do(ctx, "PUT", "/"+url.PathEscape(idx), body)
		if err == nil {
			s.log.Info("index created", "index", idx, "alias", alias, "with_alias", withAlias)
			return idx, nil
		}
		if withAlias && (statusOf(err) == 400 || typeOf(err) == "illegal_state_exception") || typeOf(err) == "resource_already_exists_exception" {
			// The alias may exist by now: a sink killed while creating it leaves its request
			// running in the cluster. The alias is created as the write index, so a second
			// index can never join it.
			if ok, xerr := s.exists(ctx, alias); xerr == nil && ok && withAlias {
				return alias, nil
			}
		}
		switch {
		case typeOf(err) == "resource_already_exists_exception":
			continue
		case statusOf(err) == 400:
			return "", connect.Permanentf("create index %s (check %s and %s): %w", idx, KeyIndexMappings, KeyIndexSettings, err)
		default:
			return "", fmt.Errorf("create index %s: %w", idx, err)
		}
	}
	return "", fmt.Errorf("create index for %s: no free generation after 20 tries", alias)
}

// lastGeneration returns the highest n of the existing indices <alias>_v<n> (0 if none).
func (s *Sink) lastGeneration(ctx context.Context, alias string) (int, error) {
	b, err := s.c.do(ctx, "GET", "/_cat/indices/"+url.PathEscape(alias)+"_v*?h=index&format=json&expand_wildcards=all", nil)
	if err != nil {
		if statusOf(err) == 404 {
			return 0, nil
		}
		return 0, fmt.Errorf("list indices of %s: %w", alias, err)
	}
	var rows []struct {
		Index string `json:"index"`
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		return 0, fmt.Errorf("list indices of %s: %w", alias, err)
	}
	last := 0
	for _, r := range rows {
		if n, ok := generationOf(r.Index, alias); ok && n > last {
			last = n
		}
	}
	return last, nil
}

func generationOf(index, alias string) (int, bool) {
	rest, ok := strings.CutPrefix(index, alias+"_v")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n > 0
}

// createBody is the create-index request: the configured settings and mappings, sluice's
// _meta in the mappings and, for a live index, the alias. An index being rebuilt is not
// refreshed until the swap (refresh_interval -1), which makes the replay faster.
func (s *Sink) createBody(alias string, gen int, withAlias, building bool) ([]byte, error) {
	mappings := map[string]any{}
	if len(s.o.mappings) > 0 {
		if err := json.Unmarshal(s.o.mappings, &mappings); err != nil {
			return nil, connect.Permanentf("%s: %w", KeyIndexMappings, err)
		}
	}
	meta, _ := mappings["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta[metaKey] = indexMeta{Connector: s.o.connectorName, Alias: alias, Generation: gen}
	mappings["_meta"] = meta
	settings := map[string]any{}
	if len(s.o.settings) > 0 {
		if err := json.Unmarshal(s.o.settings, &settings); err != nil {
			return nil, connect.Permanentf("%s: %w", KeyIndexSettings, err)
		}
	}
	if building {
		deleteRefreshInterval(settings)
		settings["index.refresh_interval"] = "-1"
	}
	body := map[string]any{"mappings": mappings, "settings": settings}
	if withAlias {
		body["aliases"] = map[string]any{alias: map[string]any{"is_write_index": true}}
	}
	return json.Marshal(body)
}

// refreshInterval returns the refresh interval index.settings asks for (nil: the default).
func (s *Sink) refreshInterval() any {
	if len(s.o.settings) == 0 {
		return nil
	}
	settings := map[string]any{}
	if json.Unmarshal(s.o.settings, &settings) != nil {
		return nil
	}
	if v, ok := settings["index.refresh_interval"]; ok {
		return v
	}
	if v, ok := settings["refresh_interval"]; ok {
		return v
	}
	if m, ok := settings["index"].(map[string]any); ok {
		return m["refresh_interval"]
	}
	return nil
}

func deleteRefreshInterval(settings map[string]any) {
	delete(settings, "index.refresh_interval")
	delete(settings, "refresh_interval")
	if m, ok := settings["index"].(map[string]any); ok {
		delete(m, "refresh_interval")
	}
}

// rebuildState marks a sink returned by BeginRebuild.
type rebuildState struct {
	live *Sink
}

// BeginRebuild returns a sink that writes every index into a fresh versioned index (created on
// first write) while s keeps writing the live ones. See connect.Rebuilder.
func (s *Sink) BeginRebuild(ctx context.Context) (connect.Sink, error) {
	r := newSink(s.o, s.log.With("rebuild", true))
	r.c = s.c
	r.rebuild = &rebuildState{live: s}
	return r, nil
}

func (s *Sink) rebuilt(rebuilt connect.Sink) (*Sink, error) {
	r, ok := rebuilt.(*Sink)
	if !ok || r.rebuild == nil || r.rebuild.live != s {
		return nil, fmt.Errorf("rebuild: %T is not a sink this sink's BeginRebuild returned", rebuilt)
	}
	return r, nil
}

// FinishRebuild makes the rebuilt indices live: it creates an empty fresh index for every alias
// the rebuild did not write (its table has no rows left), restores their refresh interval and
// refreshes them, then, in one atomic _aliases call, points every alias at its new index and
// deletes the old indices. Readers of an alias see either the old or the new view, complete.
func (s *Sink) FinishRebuild(ctx context.Context, rebuilt connect.Sink) error {
	r, err := s.rebuilt(rebuilt)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	for name := range r.indices {
		names[name] = true
	}
	for name := range s.indices {
		names[name] = true
	}
	found, err := s.connectorAliases(ctx)
	if err != nil {
		return fmt.Errorf("finish rebuild: %w", err)
	}
	for _, name := range found {
		names[name] = true
	}
	sorted := make([]string, 0, len(names))
	for name := range names {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	var fresh []string
	for _, name := range sorted {
		idx, err := r.ensureIndex(ctx, name)
		if err != nil {
			return fmt.Errorf("finish rebuild: %w", err)
		}
		fresh = append(fresh, idx)
	}
	ri := s.refreshInterval()
	for _, idx := range fresh {
		body, _ := json.Marshal(map[string]any{"index.refresh_interval": ri})
		if _, err := s.c.do(ctx, "PUT", "/"+url.PathEscape(idx)+"/_settings", body); err != nil {
			return fmt.Errorf("finish rebuild: restore refresh interval of %s: %w", idx, err)
		}
	}
	if _, err := s.c.do(ctx, "POST", "/"+url.PathEscape(strings.Join(fresh, ","))+"/_refresh", nil); err != nil {
		return fmt.Errorf("finish rebuild: refresh: %w", err)
	}
	type act map[string]map[string]any
	var actions []act
	var drop []string
	for i, name := range sorted {
		old, concrete, err := s.aliasTargets(ctx, name)
		if err != nil {
			return fmt.Errorf("finish rebuild: %w", err)
		}
		actions = append(actions, act{"add": {"index": fresh[i], "alias": name, "is_write_index": true}})
		if concrete {
			// an index called like the alias must go in the same call
			actions = append(actions, act{"remove_index": {"index": name}})
		}
		for _, o := range old {
			if o != fresh[i] {
				actions = append(actions, act{"remove": {"index": o, "alias": name}})
				drop = append(drop, o)
			}
		}
		left, err := s.leftovers(ctx, name, fresh[i], old)
		if err != nil {
			return fmt.Errorf("finish rebuild: %w", err)
		}
		drop = append(drop, left...)
	}
	body, _ := json.Marshal(map[string]any{"actions": actions})
	if _, err := s.c.do(ctx, "POST", "/_aliases", body); err != nil {
		return fmt.Errorf("finish rebuild: swap aliases: %w", err)
	}
	for _, name := range sorted {
		s.indices[name] = name
	}
	// Searches that started on an old index before the swap may still run: drop the old
	// indices a little later (in a later Write, or in Close).
	s.drops = append(s.drops, drop...)
	s.dropAt = time.Now().Add(s.o.dropDelay)
	s.log.Info("rebuild finished", "aliases", len(sorted), "new_indices", fresh, "to_drop", drop, "drop_delay", s.o.dropDelay)
	return nil
}

// leftovers returns the versioned indices of alias that no alias points at and that are
// neither the new index nor one of old: indices of aborted or crashed rebuilds.
func (s *Sink) leftovers(ctx context.Context, alias, fresh string, old []string) ([]string, error) {
	b, err := s.c.do(ctx, "GET", "/_cat/aliases/"+url.PathEscape(alias)+"?h=index&format=json", nil)
	if err != nil && statusOf(err) != 404 {
		return nil, fmt.Errorf("list aliases of %s: %w", alias, err)
	}
	aliased := map[string]bool{fresh: true}
	for _, o := range old {
		aliased[o] = true
	}
	var rows []struct {
		Index string `json:"index"`
	}
	if err == nil {
		if err := json.Unmarshal(b, &rows); err != nil {
			return nil, fmt.Errorf("list aliases of %s: %w", alias, err)
		}
	}
	for _, r := range rows {
		aliased[r.Index] = true
	}
	b, err = s.c.do(ctx, "GET", "/_cat/indices/"+url.PathEscape(alias)+"_v*?h=index&format=json&expand_wildcards=all", nil)
	if err != nil {
		if statusOf(err) == 404 {
			return nil, nil
		}
		return nil, fmt.Errorf("list indices of %s: %w", alias, err)
	}
	rows = rows[:0]
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("list indices of %s: %w", alias, err)
	}
	var out []string
	for _, r := range rows {
		if _, ok := generationOf(r.Index, alias); ok && !aliased[r.Index] {
			out = append(out, r.Index)
		}
	}
	sort.Strings(out)
	return out, nil
}

// dropOld deletes the indices a finished rebuild replaced, once their delay is over (or at
// once with force). Failures are logged and tried again later.
func (s *Sink) dropOld(ctx context.Context, force bool) {
	if len(s.drops) == 0 || !force && time.Now().Before(s.dropAt) {
		return
	}
	keep := s.drops[:0]
	for _, idx := range s.drops {
		if _, err := s.c.do(ctx, "DELETE", "/"+url.PathEscape(idx), nil); err != nil && statusOf(err) != 404 {
			s.log.Warn("drop index replaced by a rebuild", "index", idx, "err", err)
			keep = append(keep, idx)
			continue
		}
		s.log.Info("index replaced by a rebuild dropped", "index", idx)
	}
	s.drops = keep
}

// AbortRebuild deletes the indices the rebuild created; the live ones are untouched.
func (s *Sink) AbortRebuild(ctx context.Context, rebuilt connect.Sink) error {
	r, err := s.rebuilt(rebuilt)
	if err != nil {
		return err
	}
	var errs []error
	for name, idx := range r.indices {
		old, _, err := s.aliasTargets(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		live := false
		for _, o := range old {
			live = live || o == idx
		}
		if live {
			continue // never drop what readers see
		}
		if _, err := s.c.do(ctx, "DELETE", "/"+url.PathEscape(idx), nil); err != nil && statusOf(err) != 404 {
			errs = append(errs, fmt.Errorf("abort rebuild: delete %s: %w", idx, err))
		}
	}
	clear(r.indices)
	return errors.Join(errs...)
}

// aliasTargets returns the indices the alias name points at, or concrete=true when name is an
// index itself.
func (s *Sink) aliasTargets(ctx context.Context, name string) (indices []string, concrete bool, err error) {
	b, err := s.c.do(ctx, "GET", "/_alias/"+url.PathEscape(name), nil)
	if err != nil && statusOf(err) != 404 {
		return nil, false, fmt.Errorf("get alias %s: %w", name, err)
	}
	if err == nil {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, false, fmt.Errorf("get alias %s: %w", name, err)
		}
		for idx := range m {
			indices = append(indices, idx)
		}
		sort.Strings(indices)
		return indices, false, nil
	}
	ok, err := s.exists(ctx, name)
	if err != nil {
		return nil, false, err
	}
	return nil, ok, nil
}

// connectorAliases returns the aliases of the live indices this connector created (found by
// the _meta it puts in their mappings), so that a rebuild also replaces tables the live sink
// has not written since it started.
func (s *Sink) connectorAliases(ctx context.Context) ([]string, error) {
	b, err := s.c.do(ctx, "GET", "/_mapping?filter_path=*.mappings._meta."+metaKey, nil)
	if err != nil {
		return nil, fmt.Errorf("list indices: %w", err)
	}
	var m map[string]struct {
		Mappings struct {
			Meta map[string]indexMeta `json:"_meta"`
		} `json:"mappings"`
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("list indices: %w", err)
		}
	}
	var out []string
	for idx, v := range m {
		meta, ok := v.Mappings.Meta[metaKey]
		if !ok || meta.Connector != s.o.connectorName || meta.Alias == "" {
			continue
		}
		targets, _, err := s.aliasTargets(ctx, meta.Alias)
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			if t == idx {
				out = append(out, meta.Alias)
			}
		}
	}
	return out, nil
}
