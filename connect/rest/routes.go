package rest

import (
	"net/http"
	"strings"
)

// buildRoutes lists the endpoints: Kafka Connect's, then sluice's own.
func (s *Server) buildRoutes() []route {
	r := func(method, path string, h func(w http.ResponseWriter, r *http.Request, p params) error) route {
		var segs []string
		if path != "/" {
			segs = strings.Split(strings.TrimPrefix(path, "/"), "/")
		}
		return route{method: method, pattern: segs, handle: h}
	}
	routes := []route{
		r("GET", "/", s.root),
		r("GET", "/connectors", s.listConnectors),
		r("POST", "/connectors", s.createConnector),
		r("GET", "/connectors/{c}", s.getConnector),
		r("DELETE", "/connectors/{c}", s.deleteConnector),
		r("GET", "/connectors/{c}/config", s.getConfig),
		r("PUT", "/connectors/{c}/config", s.putConfig),
		r("PATCH", "/connectors/{c}/config", s.patchConfig),
		r("GET", "/connectors/{c}/status", s.getStatus),
		r("POST", "/connectors/{c}/restart", s.restart),
		r("PUT", "/connectors/{c}/pause", s.pause),
		r("PUT", "/connectors/{c}/resume", s.resume),
		r("PUT", "/connectors/{c}/stop", s.stop),
		r("GET", "/connectors/{c}/tasks", s.tasks),
		r("GET", "/connectors/{c}/tasks/{t}/status", s.taskStatus),
		r("POST", "/connectors/{c}/tasks/{t}/restart", s.restartTask),
		r("GET", "/connectors/{c}/topics", s.activeTopics),
		r("PUT", "/connectors/{c}/topics/reset", s.resetTopics),
		r("GET", "/connectors/{c}/offsets", s.getOffsets),
		r("PATCH", "/connectors/{c}/offsets", s.alterOffsets),
		r("DELETE", "/connectors/{c}/offsets", s.resetOffsets),
		r("GET", "/connector-plugins", s.listPlugins),
		r("GET", "/connector-plugins/{p}/config", s.pluginConfig),
		r("PUT", "/connector-plugins/{p}/config/validate", s.validate),
		r("GET", "/admin/loggers", s.loggers),
		r("GET", "/admin/loggers/{name}", s.getLogger),
		r("PUT", "/admin/loggers/{name}", s.setLogger),
		// sluice's own.
		r("GET", "/topics", s.listTopics),
		r("GET", "/topics/{t}", s.getTopic),
		r("GET", "/topics/{t}/partitions/{p}/records", s.records),
		r("POST", "/connectors/{c}/rebuild", s.startRebuild),
		r("GET", "/connectors/{c}/rebuild", s.rebuildStatus),
		r("GET", "/connectors/{c}/lag", s.lag),
		r("GET", "/connectors/{c}/wait", s.wait),
		r("POST", "/connectors/{c}/snapshots", s.startSnapshot),
		r("GET", "/connectors/{c}/snapshots", s.snapshotStatus),
		r("PUT", "/connectors/{c}/snapshots/pause", s.snapshotSignal("pause-snapshot")),
		r("PUT", "/connectors/{c}/snapshots/resume", s.snapshotSignal("resume-snapshot")),
		r("DELETE", "/connectors/{c}/snapshots", s.snapshotSignal("stop-snapshot")),
		r("GET", "/metrics", s.metrics),
	}
	health := r("GET", "/health", s.health)
	health.public = true
	return append(routes, health)
}
