package rest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
)

// Incremental snapshots of a source connector:
//
//	POST   /connectors/{c}/snapshots          execute-snapshot (Debezium's data object)
//	GET    /connectors/{c}/snapshots          status and progress
//	PUT    /connectors/{c}/snapshots/pause    pause-snapshot
//	PUT    /connectors/{c}/snapshots/resume   resume-snapshot
//	DELETE /connectors/{c}/snapshots          stop-snapshot (all tables, or the body's)
//
// The source validates the request and stores it before the API answers 202; the answer is
// the status, {"name": ..., "state": ..., "tables": [...]}.

// withName prepends "name" to a status object.
func withName(name string, status []byte) json.RawMessage {
	n, _ := json.Marshal(name)
	status = bytes.TrimSpace(status)
	if len(status) < 2 || status[0] != '{' {
		return status
	}
	out := append([]byte(`{"name":`), n...)
	if !bytes.Equal(status, []byte("{}")) {
		out = append(out, ',')
	}
	return append(out, status[1:]...)
}

// optionalObject reads a body that may be absent; when present it must be a JSON object.
func optionalObject(r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(r.Body)
	if err == nil && len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
	body, aerr := readBody(r)
	if aerr != nil {
		return nil, aerr
	}
	if _, aerr := objectFields(body, ""); aerr != nil {
		return nil, aerr
	}
	return body, nil
}

// errReader returns err (io.EOF when nil).
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

func (s *Server) startSnapshot(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	body, aerr := readBody(r)
	if aerr != nil {
		return aerr
	}
	if _, aerr := objectFields(body, ""); aerr != nil {
		return aerr
	}
	st, err := s.rt.SnapshotSignal(r.Context(), p["c"], "execute-snapshot", body)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/connectors/"+url.PathEscape(p["c"])+"/snapshots")
	return writeJSON(w, r, http.StatusAccepted, withName(p["c"], st))
}

func (s *Server) snapshotStatus(w http.ResponseWriter, r *http.Request, p params) error {
	if _, aerr := query(r); aerr != nil {
		return aerr
	}
	st, err := s.rt.SnapshotStatus(p["c"])
	if err != nil {
		return err
	}
	return writeJSON(w, r, http.StatusOK, withName(p["c"], st))
}

func (s *Server) snapshotSignal(typ string) func(w http.ResponseWriter, r *http.Request, p params) error {
	return func(w http.ResponseWriter, r *http.Request, p params) error {
		if _, aerr := query(r); aerr != nil {
			return aerr
		}
		body, aerr := optionalObject(r)
		if aerr != nil {
			return aerr
		}
		st, err := s.rt.SnapshotSignal(r.Context(), p["c"], typ, body)
		if err != nil {
			return err
		}
		return writeJSON(w, r, http.StatusAccepted, withName(p["c"], st))
	}
}
