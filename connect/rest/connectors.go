package rest

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/runtime"
)

// Kafka Connect's JSON shapes.

type taskID struct {
	Connector string `json:"connector"`
	Task      int    `json:"task"`
}

type connectorInfo struct {
	Name   string            `json:"name"`
	Config map[string]string `json:"config"`
	Tasks  []taskID          `json:"tasks"`
	Type   string            `json:"type"`
}

type stateInfo struct {
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace,omitempty"`
}

type taskState struct {
	ID       int    `json:"id"`
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace,omitempty"`
}

type connectorStatus struct {
	Name      string      `json:"name"`
	Connector stateInfo   `json:"connector"`
	Tasks     []taskState `json:"tasks"`
	Type      string      `json:"type"`
}

type taskInfo struct {
	ID     taskID            `json:"id"`
	Config map[string]string `json:"config"`
}

// displayConfig returns a connector's configuration as the API shows it: as written,
// placeholders unresolved, secrets written inline as "****", with name and connector.class
// set as Kafka Connect shows them.
func (s *Server) displayConfig(name string) (map[string]string, error) {
	class, cfg, err := s.rt.Config(name)
	if err != nil {
		return nil, err
	}
	if _, ok := cfg[runtime.KeyClass]; !ok && class != "" {
		cfg[runtime.KeyClass] = class
	}
	if _, ok := cfg[runtime.KeyName]; !ok {
		cfg[runtime.KeyName] = name
	}
	return cfg, nil
}

func (s *Server) info(name string) (connectorInfo, error) {
	cfg, err := s.displayConfig(name)
	if err != nil {
		return connectorInfo{}, err
	}
	st, err := s.rt.Status(name)
	if err != nil {
		return connectorInfo{}, err
	}
	ci := connectorInfo{Name: name, Config: cfg, Tasks: []taskID{}, Type: kindName(st.Type)}
	for _, t := range st.Tasks {
		ci.Tasks = append(ci.Tasks, taskID{Connector: name, Task: t.ID})
	}
	return ci, nil
}

func kindName(k connect.Kind) string {
	if k == "" {
		return "unknown"
	}
	return string(k)
}

func (s *Server) status(name string) (connectorStatus, error) {
	st, err := s.rt.Status(name)
	if err != nil {
		return connectorStatus{}, err
	}
	out := connectorStatus{
		Name:      name,
		Connector: stateInfo{State: string(st.Connector.State), WorkerID: st.Connector.WorkerID, Trace: st.Connector.Trace},
		Tasks:     []taskState{},
		Type:      kindName(st.Type),
	}
	for _, t := range st.Tasks {
		ts := taskState{ID: t.ID, State: string(t.State), WorkerID: t.WorkerID}
		if t.State == runtime.StateFailed || t.State == runtime.StateRestarting {
			ts.Trace = t.Trace
		}
		out.Tasks = append(out.Tasks, ts)
	}
	return out, nil
}

// query checks a request's query parameters against the allowed names and returns them.
func query(r *http.Request, allowed ...string) (url.Values, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query string is not valid: %v", err)
	}
	for k := range q {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
			}
		}
		if !ok {
			msg := fmt.Sprintf("unknown query parameter %q", k)
			if len(allowed) > 0 {
				msg += "; known: " + strings.Join(allowed, ", ")
			} else {
				msg += "; this endpoint takes none"
			}
			return nil, badRequest("%s", msg)
		}
	}
	return q, nil
}

// boolParam reads a true/false query parameter.
func boolParam(q url.Values, name string) (bool, *apiError) {
	vs := q[name]
	if len(vs) == 0 {
		return false, nil
	}
	if len(vs) > 1 {
		return false, badRequest("query parameter %s is given %d times", name, len(vs))
	}
	switch strings.ToLower(vs[0]) {
	case "true":
		return true, nil
	case "false", "":
		return false, nil
	}
	return false, badRequest("query parameter %s must be true or false (got %q)", name, vs[0])
}

// noteSecrets registers what a submitted configuration reveals, so that no answer to this
// request carries it: values of secret keys written inline and the resolved values of
// placeholders.
func (s *Server) noteSecrets(r *http.Request, class string, config map[string]string) {
	sc := scrubOf(r)
	if sc == nil {
		return
	}
	if class == "" {
		class = strings.TrimSpace(config[runtime.KeyClass])
	}
	p, _ := s.rt.Registry().Lookup(class, connect.KindSource, connect.KindSink, connect.KindTransform, connect.KindPredicate)
	def := runtime.DefFor(p)
	for k, v := range config {
		if runtime.IsPlaceholder(v) {
			continue
		}
		if def.IsSecret(k) || looksSecret(k) {
			sc.add(v)
		}
	}
	if s.opts.Resolve != nil {
		resolved, _ := s.opts.Resolve(config)
		for k, v := range config {
			if runtime.IsPlaceholder(v) {
				sc.add(resolved[k])
			}
		}
	}
}

// looksSecret is a second line of defence for keys no plugin declares secret (transform
// settings, keys of an unknown class).
func looksSecret(key string) bool {
	k := strings.ToLower(key)
	for _, w := range []string{"password", "secret", "token", "credential", "api.key", "apikey", "private.key"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// keepRedacted replaces "****" given for a key whose current value is a secret written inline
// by that value, so that a configuration read from the API can be sent back unchanged.
func keepRedacted(next, current, display map[string]string) {
	for k, v := range next {
		if v == connect.Redacted && display[k] == connect.Redacted {
			if cur, ok := current[k]; ok {
				next[k] = cur
			}
		}
	}
}

func (s *Server) listConnectors(w http.ResponseWriter, r *http.Request, _ params) error {
	q, aerr := query(r, "expand")
	if aerr != nil {
		return aerr
	}
	names := s.rt.Names()
	expand := q["expand"]
	if len(expand) == 0 {
		return writeJSON(w, r, http.StatusOK, names)
	}
	for _, e := range expand {
		if e != "status" && e != "info" {
			return badRequest("query parameter expand must be status or info (got %q)", e)
		}
	}
	out := map[string]map[string]any{}
	for _, n := range names {
		m := map[string]any{}
		for _, e := range expand {
			var v any
			var err error
			if e == "status" {
				v, err = s.status(n)
			} else {
				v, err = s.info(n)
			}
			if err != nil {
				continue // deleted meanwhile
			}
			m[e] = v
		}
		out[n] = m
	}
	return writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) createConnector(w http.ResponseWriter, r *http.Request, _ params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	fields, aerr := objectFields(body, "")
	if aerr != nil {
		return aerr
	}
	if aerr := checkFields(fields, "", "name", "config", "initial_state"); aerr != nil {
		return aerr
	}
	var (
		name   string
		config map[string]string
		state  runtime.State
		hasCfg bool
	)
	for _, f := range fields {
		switch f.key {
		case "name":
			if name, aerr = stringValue(f, ""); aerr != nil {
				return aerr
			}
			name = strings.TrimSpace(name)
		case "config":
			if config, _, aerr = configMap(f.raw, "config", false); aerr != nil {
				return aerr
			}
			hasCfg = true
		case "initial_state":
			v, aerr := stringValue(f, "")
			if aerr != nil {
				return aerr
			}
			switch st := runtime.State(strings.ToUpper(v)); st {
			case runtime.StateRunning, runtime.StatePaused, runtime.StateStopped:
				state = st
			default:
				return badRequest("initial_state must be RUNNING, PAUSED or STOPPED (got %q)", v)
			}
		}
	}
	if name == "" {
		return badRequest("name is required: the connector's name")
	}
	if !hasCfg {
		return badRequest("config is required: the connector's configuration")
	}
	if err := putName(name, config); err != nil {
		return err
	}
	s.noteSecrets(r, "", config)
	if err := s.rt.Create(r.Context(), runtime.ConnectorSpec{Name: name, Config: config, State: state}); err != nil {
		return err
	}
	info, err := s.info(name)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/connectors/"+url.PathEscape(name))
	return writeJSON(w, r, http.StatusCreated, info)
}

// putName checks the name key of a configuration against the connector's name, and sets it.
func putName(name string, config map[string]string) *apiError {
	if n, ok := config[runtime.KeyName]; ok && n != name {
		return badRequest("config.name (%s) does not match the connector's name (%s)", n, name)
	}
	config[runtime.KeyName] = name
	return nil
}

func (s *Server) getConnector(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	info, err := s.info(p["c"])
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, info)
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	cfg, err := s.displayConfig(p["c"])
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, cfg)
}

// refuseFile answers 409 for a connector of a pipeline file.
func (s *Server) refuseFile(name, what string) error {
	origin, file, err := s.rt.Origin(name)
	if err != nil {
		return err
	}
	if origin == runtime.OriginFile {
		where := "a pipeline file"
		if file != "" {
			where = file
		}
		return errorf(http.StatusConflict, "connector %s is defined in %s: %s it there and restart sluice (pipeline files are applied again at every start)", name, where, what)
	}
	return nil
}

func (s *Server) putConfig(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	config, _, aerr := configMap(body, "", false)
	if aerr != nil {
		return aerr
	}
	if err := putName(name, config); err != nil {
		return err
	}
	if _, _, err := s.rt.Config(name); err == nil {
		if err := s.refuseFile(name, "change"); err != nil {
			return err
		}
		_, current, _ := s.rt.Written(name)
		display, _ := s.displayConfig(name)
		keepRedacted(config, current, display)
	}
	s.noteSecrets(r, "", config)
	created, err := s.rt.Put(r.Context(), runtime.ConnectorSpec{Name: name, Config: config})
	if err != nil {
		return err
	}
	info, err := s.info(name)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/connectors/"+url.PathEscape(name))
	}
	return writeJSON(w, r, status, info)
}

func (s *Server) patchConfig(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	patch, remove, aerr := configMap(body, "", true)
	if aerr != nil {
		return aerr
	}
	if err := s.refuseFile(name, "change"); err != nil {
		return err
	}
	_, current, err := s.rt.Written(name)
	if err != nil {
		return err
	}
	display, _ := s.displayConfig(name)
	keepRedacted(patch, current, display)
	next := maps.Clone(current)
	maps.Copy(next, patch)
	for _, k := range remove {
		delete(next, k)
	}
	if err := putName(name, next); err != nil {
		return err
	}
	s.noteSecrets(r, "", next)
	if _, err := s.rt.Put(r.Context(), runtime.ConnectorSpec{Name: name, Config: next}); err != nil {
		return err
	}
	info, err := s.info(name)
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, info)
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	st, err := s.status(p["c"])
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, st)
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request, p params) error {
	q, aerr := query(r, "includeTasks", "onlyFailed")
	if aerr != nil {
		return aerr
	}
	includeTasks, aerr := boolParam(q, "includeTasks")
	if aerr != nil {
		return aerr
	}
	onlyFailed, aerr := boolParam(q, "onlyFailed")
	if aerr != nil {
		return aerr
	}
	name := p["c"]
	st, err := s.rt.Status(name)
	if err != nil {
		return err
	}
	// sluice runs a connector as one task, so the connector instance and its task restart
	// together. A STOPPED connector stays stopped (resume starts it).
	if st.Connector.State != runtime.StateStopped {
		if err := s.rt.Restart(r.Context(), name, onlyFailed); err != nil {
			return err
		}
	}
	if !includeTasks && !onlyFailed {
		return writeEmpty(w, http.StatusNoContent)
	}
	out, err := s.status(name)
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusAccepted, out)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	if err := s.rt.Pause(p["c"]); err != nil {
		return err
	}
	return writeEmpty(w, http.StatusAccepted)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	if err := s.rt.Resume(p["c"]); err != nil {
		return err
	}
	return writeEmpty(w, http.StatusAccepted)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	if err := s.rt.Stop(r.Context(), p["c"]); err != nil {
		return err
	}
	return writeEmpty(w, http.StatusNoContent)
}

func (s *Server) deleteConnector(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	if err := s.refuseFile(name, "remove"); err != nil {
		return err
	}
	if err := s.rt.Delete(r.Context(), name); err != nil {
		return err
	}
	return writeEmpty(w, http.StatusNoContent)
}

func (s *Server) tasks(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	name := p["c"]
	st, err := s.rt.Status(name)
	if err != nil {
		return err
	}
	cfg, err := s.displayConfig(name)
	if err != nil {
		return err
	}
	out := []taskInfo{}
	for _, t := range st.Tasks {
		out = append(out, taskInfo{ID: taskID{Connector: name, Task: t.ID}, Config: cfg})
	}
	return writeJSON(w, r, http.StatusOK, out)
}

// task returns the task number of a path, which must exist.
func (s *Server) task(name, t string) (int, error) {
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, badRequest("task must be a task number (got %q)", t)
	}
	st, err := s.rt.Status(name)
	if err != nil {
		return 0, err
	}
	for _, ts := range st.Tasks {
		if ts.ID == n {
			return n, nil
		}
	}
	return 0, notFound("connector %s has no task %d", name, n)
}

func (s *Server) taskStatus(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	n, err := s.task(p["c"], p["t"])
	if err != nil {
		return err
	}
	st, err := s.status(p["c"])
	if err != nil {
		return err
	}
	for _, ts := range st.Tasks {
		if ts.ID == n {
			return writeJSON(w, r, http.StatusOK, ts)
		}
	}
	return notFound("connector %s has no task %d", p["c"], n)
}

func (s *Server) restartTask(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	if _, err := s.task(p["c"], p["t"]); err != nil {
		return err
	}
	if err := s.rt.Restart(r.Context(), p["c"], false); err != nil {
		return err
	}
	return writeEmpty(w, http.StatusNoContent)
}

func (s *Server) activeTopics(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	topics, err := s.rt.ActiveTopics(p["c"])
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, map[string]any{p["c"]: map[string]any{"topics": topics}})
}

func (s *Server) resetTopics(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	if err := s.rt.ResetActiveTopics(p["c"]); err != nil {
		return err
	}
	return writeEmpty(w, http.StatusAccepted)
}
