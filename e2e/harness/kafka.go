package harness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const kafkaInstall = "bash e2e/setup/setup.sh fetches org.apache.kafka:kafka_2.13:4.4.0 and its dependencies from Maven Central"

// KafkaOptions configures StartKafka. The zero value is a single combined broker/controller.
type KafkaOptions struct {
	// Settings are extra server.properties lines ("key=value"), written after the harness's own.
	Settings []string
	// FullJIT runs the broker with the JVM's full JIT, for benchmarks: slower to start, faster
	// once warm. The default stops at the C1 compiler, which starts sooner on two cores.
	FullJIT bool
	// StartTimeout bounds each start (default 120 s).
	StartTimeout time.Duration
}

// Kafka is a private Apache Kafka 4 in KRaft mode: one process that is both broker and
// controller (node id 1), PLAINTEXT on loopback, replication factor 1 for the internal topics,
// a 512 MiB heap.
type Kafka struct {
	*Server

	Host           string // 127.0.0.1
	Port           int    // the broker listener
	ControllerPort int
	ClusterID      string
}

// StartKafka formats a fresh KRaft storage dir (kafka.tools.StorageTool) and starts
// kafka.Kafka on free loopback ports, returning once the broker answers a metadata request
// that lists itself. The caller must Close it.
//
// The jars are found in SLUICE_KAFKA_LIBS, else $SLUICE_CACHE/kafka/libs (cache default
// /var/cache/sluice); Java 17 in SLUICE_JAVA_HOME, else /usr/lib/jvm/java-17-openjdk-amd64.
func StartKafka(ctx context.Context, opts KafkaOptions) (*Kafka, error) {
	libs := os.Getenv("SLUICE_KAFKA_LIBS")
	how := "SLUICE_KAFKA_LIBS"
	if libs == "" {
		libs, how = filepath.Join(cacheDir(), "kafka", "libs"), "SLUICE_KAFKA_LIBS to override"
	}
	if m, _ := filepath.Glob(filepath.Join(libs, "kafka_2.13-*.jar")); len(m) == 0 {
		return nil, fmt.Errorf("start kafka: %w", &NotInstalledError{
			What: fmt.Sprintf("kafka_2.13 jar not found in %s (%s)", libs, how), Install: kafkaInstall})
	}
	javaHome, err := findJava17()
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	dir, err := makeDir("kafka")
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	k := &Kafka{Server: newServer("kafka", dir), Host: "127.0.0.1"}
	k.startTimeout = 120 * time.Second
	if opts.StartTimeout > 0 {
		k.startTimeout = opts.StartTimeout
	}
	k.closeGrace = 0 // nothing to keep: SIGKILL is quickest
	k.poll = 100 * time.Millisecond
	if k.ClusterID, err = newKafkaClusterID(); err != nil {
		return nil, fmt.Errorf("start kafka: %w", errJoinClose(err, k.Server))
	}
	ports, err := pickPorts(2)
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", errJoinClose(err, k.Server))
	}
	k.Port, k.ControllerPort = ports[0], ports[1]
	k.repick = func() error {
		ports, err := pickPorts(2)
		if err == nil {
			k.Port, k.ControllerPort = ports[0], ports[1]
		}
		return err
	}
	props := filepath.Join(dir, "server.properties")
	log4j := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(kafkaLog4j), 0o644); err != nil {
		return nil, fmt.Errorf("start kafka: %w", errJoinClose(err, k.Server))
	}
	java := filepath.Join(javaHome, "bin", "java")
	cp := filepath.Join(libs, "*")
	if err := k.writeProps(props, opts); err != nil {
		return nil, fmt.Errorf("start kafka: %w", errJoinClose(err, k.Server))
	}
	// the storage format records the cluster id, node id and metadata version, not the ports
	err = runQuiet(ctx, []string{java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dlog4j2.configurationFile=" + log4j, "-cp", cp,
		"kafka.tools.StorageTool", "format", "--cluster-id", k.ClusterID, "--config", props},
		dir, baseEnv(), nil, filepath.Join(dir, "format.log"))
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", errJoinClose(err, k.Server))
	}
	k.launch = func() ([]string, *proc, error) {
		if err := k.writeProps(props, opts); err != nil {
			return nil, nil, err
		}
		argv := []string{java, "-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"}
		if !opts.FullJIT {
			argv = append(argv, "-XX:TieredStopAtLevel=1")
		}
		argv = append(argv, "-Djava.awt.headless=true", "-Dlog4j2.configurationFile="+log4j,
			"-cp", cp, "kafka.Kafka", props)
		p, err := spawn(argv, dir, baseEnv(), nil, k.logPath, syscall.SIGTERM)
		return argv, p, err
	}
	k.ready = k.ping
	if err := startOrClean(ctx, k.Server); err != nil {
		return nil, err
	}
	return k, nil
}

// NewKafka is StartKafka for one test: it fails t when the server does not start and closes
// the server in t.Cleanup.
func NewKafka(t testing.TB, opts KafkaOptions) *Kafka {
	t.Helper()
	k, err := StartKafka(context.Background(), opts)
	return mustStart(t, k, err)
}

// Bootstrap is the bootstrap server address (host:port), as franz-go's kgo.SeedBrokers wants it.
func (k *Kafka) Bootstrap() string { return fmt.Sprintf("%s:%d", k.Host, k.Port) }

func (k *Kafka) writeProps(path string, opts KafkaOptions) error {
	lines := []string{
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", k.ControllerPort),
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", k.Port, k.ControllerPort),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://127.0.0.1:%d", k.Port),
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=PLAINTEXT",
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs=" + filepath.Join(k.dir, "data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"offsets.topic.num.partitions=4",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"transaction.state.log.num.partitions=4",
		"share.coordinator.state.topic.replication.factor=1",
		"share.coordinator.state.topic.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		// a broker killed and started again cannot register until its old session expires
		// (default 9 s): keep that short, heartbeats well inside it
		"broker.session.timeout.ms=3000",
		"broker.heartbeat.interval.ms=500",
	}
	lines = append(lines, opts.Settings...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write server.properties: %w", err)
	}
	return nil
}

// ping succeeds once the broker answers a metadata request that lists itself (it opens its
// listener for clients only after it has registered with the controller).
func (k *Kafka) ping(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap()), kgo.DialTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	if len(resp.Brokers) == 0 {
		return fmt.Errorf("metadata lists no broker")
	}
	return nil
}

// newKafkaClusterID returns a Kafka Uuid in its base64 form (22 characters). One that starts
// with '-' would be taken for an option by the storage tool's parser.
func newKafkaClusterID() (string, error) {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("cluster id: %w", err)
		}
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if id[0] != '-' && id[0] != '_' {
			return id, nil
		}
	}
}

// kafkaLog4j sends INFO and above to stdout (the server log); request logs stay quiet.
const kafkaLog4j = `status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
`
