package harness

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	elasticsearchInstall = "bash e2e/setup/setup.sh fetches org.elasticsearch.distribution.integ-test-zip:elasticsearch:8.19.21:zip from Maven Central"
	javaInstall          = "apt-get install -y openjdk-17-jdk-headless"
	runUserInstall       = "useradd --system --user-group --no-create-home --shell /usr/sbin/nologin sluice"
)

// runUser is the unprivileged OS user that runs Elasticsearch, which refuses root.
const runUser = "sluice"

// ElasticsearchOptions configures StartElasticsearch. The zero value is a single-node server
// with security off.
type ElasticsearchOptions struct {
	// Settings are extra elasticsearch.yml lines ("key: value"), written after the harness's own.
	Settings []string
	// FullJIT runs the server with the JVM's full JIT, for benchmarks: slower to start, faster
	// once warm. The default stops at the C1 compiler, which starts about a third sooner on two
	// cores.
	FullJIT bool
	// StartTimeout bounds each start (default 120 s).
	StartTimeout time.Duration
}

// Elasticsearch is a private single-node Elasticsearch (the integ-test distribution: core,
// x-pack-core/security, netty; no ingest, painless, reindex or the root "GET /" endpoint) run
// by the OS user "sluice" with a 512 MiB heap, security off and disk watermarks disabled.
type Elasticsearch struct {
	*Server

	Host          string // 127.0.0.1
	Port          int    // HTTP
	TransportPort int
}

// StartElasticsearch copies the distribution's config into a fresh dir, starts
// bin/elasticsearch as the OS user "sluice" on free loopback ports and returns once the
// cluster health is yellow or green. The caller must Close it.
//
// The distribution is found in SLUICE_ES_HOME, else $SLUICE_CACHE/elasticsearch (cache
// default /var/cache/sluice); Java 17 in SLUICE_JAVA_HOME, else /usr/lib/jvm/java-17-openjdk-amd64.
func StartElasticsearch(ctx context.Context, opts ElasticsearchOptions) (*Elasticsearch, error) {
	home := os.Getenv("SLUICE_ES_HOME")
	how := "SLUICE_ES_HOME"
	if home == "" {
		home, how = filepath.Join(cacheDir(), "elasticsearch"), "SLUICE_ES_HOME to override"
	}
	if !isExecutable(filepath.Join(home, "bin", "elasticsearch")) {
		return nil, fmt.Errorf("start elasticsearch: %w", &NotInstalledError{
			What: fmt.Sprintf("elasticsearch not found in %s (%s)", home, how), Install: elasticsearchInstall})
	}
	javaHome, err := findJava17()
	if err != nil {
		return nil, fmt.Errorf("start elasticsearch: %w", err)
	}
	cred, err := osUser(runUser, runUserInstall)
	if err != nil {
		return nil, fmt.Errorf("start elasticsearch: %w", err)
	}
	dir, err := makeDir("elasticsearch")
	if err != nil {
		return nil, fmt.Errorf("start elasticsearch: %w", err)
	}
	es := &Elasticsearch{Server: newServer("elasticsearch", dir), Host: "127.0.0.1"}
	es.startTimeout = 120 * time.Second
	if opts.StartTimeout > 0 {
		es.startTimeout = opts.StartTimeout
	}
	es.closeGrace = 0 // nothing to keep: SIGKILL is quickest
	es.poll = 100 * time.Millisecond
	conf := filepath.Join(dir, "config")
	if err := copyESConfig(filepath.Join(home, "config"), conf); err != nil {
		return nil, fmt.Errorf("start elasticsearch: %w", errJoinClose(err, es.Server))
	}
	for _, d := range []string{"data", "logs", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("start elasticsearch: %w", errJoinClose(err, es.Server))
		}
	}
	ports, err := pickPorts(2)
	if err != nil {
		return nil, fmt.Errorf("start elasticsearch: %w", errJoinClose(err, es.Server))
	}
	es.Port, es.TransportPort = ports[0], ports[1]
	es.repick = func() error {
		ports, err := pickPorts(2)
		if err == nil {
			es.Port, es.TransportPort = ports[0], ports[1]
		}
		return err
	}
	// AlwaysPreTouch (on in jvm.options) would touch the whole heap before starting
	javaOpts := "-Xms512m -Xmx512m -XX:-AlwaysPreTouch"
	if !opts.FullJIT {
		javaOpts += " -XX:TieredStopAtLevel=1"
	}
	env := baseEnv(
		"HOME="+dir,
		"ES_JAVA_HOME="+javaHome,
		"ES_PATH_CONF="+conf,
		"ES_TMPDIR="+filepath.Join(dir, "tmp"),
		// the launcher JVM makes temp dirs too (final-flags*): keep them in the instance dir
		"CLI_JAVA_OPTS=-Djava.io.tmpdir="+filepath.Join(dir, "tmp"),
		"ES_JAVA_OPTS="+javaOpts,
	)
	es.launch = func() ([]string, *proc, error) {
		yml := []string{
			"cluster.name: sluice-e2e",
			"node.name: node-1",
			"discovery.type: single-node",
			"network.host: 127.0.0.1",
			fmt.Sprintf("http.port: %d", es.Port),
			fmt.Sprintf("transport.port: %d", es.TransportPort),
			"path.data: " + filepath.Join(dir, "data"),
			"path.logs: " + filepath.Join(dir, "logs"),
			"xpack.security.enabled: false",
			// the disks are shared with other tests: never turn indices read-only
			"cluster.routing.allocation.disk.threshold_enabled: false",
			"action.destructive_requires_name: false",
		}
		yml = append(yml, opts.Settings...)
		if err := os.WriteFile(filepath.Join(conf, "elasticsearch.yml"), []byte(strings.Join(yml, "\n")+"\n"), 0o644); err != nil {
			return nil, nil, fmt.Errorf("write elasticsearch.yml: %w", err)
		}
		if err := chownTree(dir, cred); err != nil {
			return nil, nil, err
		}
		argv := []string{filepath.Join(home, "bin", "elasticsearch")}
		p, err := spawn(argv, dir, env, cred, es.logPath, syscall.SIGTERM)
		return argv, p, err
	}
	es.ready = func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			es.URL()+"/_cluster/health?wait_for_status=yellow&timeout=1s", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("cluster health: %s: %s", resp.Status, body)
		}
		return nil
	}
	if err := startOrClean(ctx, es.Server); err != nil {
		return nil, err
	}
	return es, nil
}

// NewElasticsearch is StartElasticsearch for one test: it fails t when the server does not
// start and closes the server in t.Cleanup.
func NewElasticsearch(t testing.TB, opts ElasticsearchOptions) *Elasticsearch {
	t.Helper()
	es, err := StartElasticsearch(context.Background(), opts)
	return mustStart(t, es, err)
}

// URL is the HTTP base URL, as go-elasticsearch wants it in Config.Addresses.
func (es *Elasticsearch) URL() string { return fmt.Sprintf("http://%s:%d", es.Host, es.Port) }

// copyESConfig copies the distribution's config dir, dropping the GC log and heap dumps that
// jvm.options turns on (they would be written into the server's working dir).
func copyESConfig(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if rel == "jvm.options" {
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "-Xlog:gc") || strings.Contains(l, "HeapDumpOnOutOfMemoryError") {
					continue
				}
				keep = append(keep, l)
			}
			b = []byte(strings.Join(keep, "\n"))
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("copy elasticsearch config: %w", err)
	}
	return nil
}

func chownTree(root string, cred *syscall.Credential) error {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("chown %s: %w", root, err)
	}
	return nil
}

// findJava17 returns a Java 17 home: SLUICE_JAVA_HOME, else Debian's openjdk-17.
func findJava17() (string, error) {
	home := os.Getenv("SLUICE_JAVA_HOME")
	how := "SLUICE_JAVA_HOME"
	if home == "" {
		home, how = "/usr/lib/jvm/java-17-openjdk-amd64", "SLUICE_JAVA_HOME to override"
	}
	if !isExecutable(filepath.Join(home, "bin", "java")) {
		return "", &NotInstalledError{What: fmt.Sprintf("java not found in %s/bin (%s)", home, how), Install: javaInstall}
	}
	return home, nil
}
