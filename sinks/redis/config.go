package redis

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sinks/internal/change"
)

// Configuration keys, with Redis Kafka Connect's names where it has one.
const (
	KeyURI            = "redis.uri"
	KeyHost           = "redis.host"
	KeyPort           = "redis.port"
	KeyUsername       = "redis.username"
	KeyPassword       = "redis.password"
	KeyDatabase       = "redis.database"
	KeyTLS            = "redis.tls"
	KeyInsecure       = "redis.insecure"
	KeyCACert         = "redis.cacert"
	KeyClientCert     = "redis.key.cert"
	KeyClientKey      = "redis.key.file"
	KeyTimeout        = "redis.timeout"
	KeyCluster        = "redis.cluster"
	KeyType           = "redis.type"
	KeyKey            = "redis.key"
	KeyKeyspace       = "redis.keyspace"
	KeySeparator      = "redis.separator"
	KeyTTL            = "redis.key.ttl"
	KeyMarkerTTL      = "redis.delete.marker.ttl"
	KeyStreamMaxLen   = "redis.stream.maxlen"
	KeyMetaPrefix     = "redis.meta.prefix"
	KeyWaitReplicas   = "redis.wait.replicas"
	KeyWaitTimeout    = "redis.wait.timeout"
	KeyBatchSize      = "batch.size"
	KeyMaxRetries     = "max.retries"
	KeyRetryBackoff   = "retry.backoff.ms"
	KeyRetryBackoffMx = "retry.backoff.max.ms"
	KeyCleanupDelay   = "rebuild.cleanup.delay.ms"
	KeyVersionCache   = "redis.version.cache.size"
	KeyVersionStore   = "redis.version.storage"
)

// The values of redis.version.storage.
const (
	StoreField = "field"
	StoreKey   = "key"
)

// The values of redis.type.
const (
	TypeHash   = "hash"
	TypeJSON   = "json"
	TypeStream = "stream"
)

func ignored(name, doc string) connect.ConfigKey {
	return connect.ConfigKey{Name: name, Type: connect.TypeString, Ignored: true, Doc: doc, Group: "Ignored", Importance: connect.Low}
}

func configDef() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyURI, Type: connect.TypeString, Default: "redis://localhost:6379", HasDefault: true, Group: "Connection", Importance: connect.High, Check: checkURI,
			Doc: "The server: redis://[user:password@]host:port[/db], rediss:// for TLS. Ignored when redis.host is set."},
		{Name: KeyHost, Type: connect.TypeString, Group: "Connection", Importance: connect.High,
			Doc: "The server's host, instead of redis.uri."},
		{Name: KeyPort, Type: connect.TypeInt, Default: "6379", HasDefault: true, Check: connect.InRange(1, 65535), Group: "Connection", Importance: connect.High,
			Doc: "The server's port, with redis.host."},
		{Name: KeyUsername, Type: connect.TypeString, Group: "Connection", Importance: connect.Medium,
			Doc: "ACL user; overrides the URI's."},
		{Name: KeyPassword, Type: connect.TypePassword, Group: "Connection", Importance: connect.Medium,
			Doc: "Password; overrides the URI's."},
		{Name: KeyDatabase, Type: connect.TypeInt, Default: "-1", HasDefault: true, Check: connect.InRange(-1, 1<<20), Group: "Connection", Importance: connect.Medium,
			Doc: "Database number; -1 keeps the URI's (0 when it has none)."},
		{Name: KeyTLS, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Connection", Importance: connect.Medium,
			Doc: "Connect with TLS (also implied by a rediss:// URI)."},
		{Name: KeyInsecure, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Connection", Importance: connect.Low,
			Doc: "With TLS, accept any server certificate (not recommended)."},
		{Name: KeyCACert, Type: connect.TypeString, Group: "Connection", Importance: connect.Low,
			Doc: "A PEM file of CA certificates that sign the server's certificate; empty: the system's."},
		{Name: KeyClientCert, Type: connect.TypeString, Group: "Connection", Importance: connect.Low,
			Doc: "A PEM client certificate (chain) for TLS client authentication, with redis.key.file."},
		{Name: KeyClientKey, Type: connect.TypeString, Group: "Connection", Importance: connect.Low,
			Doc: "The PEM (PKCS#8 or PKCS#1) private key of redis.key.cert, unencrypted."},
		{Name: KeyTimeout, Type: connect.TypeLong, Default: "60", HasDefault: true, Check: connect.AtLeast(1), Group: "Connection", Importance: connect.Low,
			Doc: "Seconds to wait for a connection or an answer."},
		{Name: KeyCluster, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Connection", Importance: connect.Low, Check: checkFalse,
			Doc: "Only false: the sink applies a chunk of records in one MULTI/EXEC transaction, which Redis Cluster allows only within one hash slot."},
		{Name: KeyType, Type: connect.TypeString, Default: TypeHash, HasDefault: true, Enum: []string{TypeHash, TypeJSON, TypeStream, "string"}, Group: "Data", Importance: connect.High,
			Doc: "hash: one hash per row, a field per non-null column; json: the row as a JSON string (string is a synonym); stream: every change event appended (XADD) to a stream per table."},
		{Name: KeyKey, Type: connect.TypeString, Group: "Data", Importance: connect.High, Check: checkKeyTemplate,
			Doc: "The key template: ${topic}, ${db} / ${schema} (the topic's second-to-last dot-separated part), ${table} (its last part), ${key} (the record key's rendering) and ${key.<column>} (one key column). Default: ${table}:${key} (hash, json), ${table} (stream: the stream's key)."},
		{Name: KeyKeyspace, Type: connect.TypeString, Group: "Data", Importance: connect.Medium, Check: checkKeyTemplate,
			Doc: "Redis Kafka Connect's form of the key: when set and redis.key is not, the key is <redis.keyspace><redis.separator>${key} (placeholders allowed)."},
		{Name: KeySeparator, Type: connect.TypeString, Default: ":", HasDefault: true, Group: "Data", Importance: connect.Low,
			Doc: "Joins redis.keyspace and the record key."},
		{Name: KeyTTL, Type: connect.TypeLong, Default: "0", HasDefault: true, Check: connect.AtLeast(0), Group: "Data", Importance: connect.Medium,
			Doc: "Seconds a written row key lives (set again on every write); 0: forever."},
		{Name: KeyMarkerTTL, Type: connect.TypeLong, Default: "86400", HasDefault: true, Check: connect.AtLeast(1), Group: "Data", Importance: connect.Medium,
			Doc: "Seconds a deleted row's version marker is kept: within this time an older write that arrives late cannot bring the row back."},
		{Name: KeyStreamMaxLen, Type: connect.TypeLong, Default: "1000000", HasDefault: true, Check: connect.AtLeast(0), Group: "Data", Importance: connect.Medium,
			Doc: "stream: trim each stream to about this many entries (XADD MAXLEN ~); 0: never trim."},
		{Name: KeyMetaPrefix, Type: connect.TypeString, Default: "__sluice:${connector}:", HasDefault: true, Group: "Data", Importance: connect.Low, Check: checkMetaPrefix,
			Doc: "Prefix of the keys sluice keeps beside the view: version markers, the live generation pointer (<prefix>live) and rebuilt generations. ${connector} is the connector's name; empty means the default."},
		{Name: KeyVersionCache, Type: connect.TypeInt, Default: "500000", HasDefault: true, Check: connect.AtLeast(0), Group: "Data", Importance: connect.Low,
			Doc: "The most row versions the sink remembers (52 bytes each), so that writes to those rows need not read their versions from Redis; 0: read every version."},
		{Name: KeyVersionStore, Type: connect.TypeString, Default: StoreKey, HasDefault: true, Enum: []string{StoreField, StoreKey}, Group: "Data", Importance: connect.Medium,
			Doc: "Where a hash row's version is kept. field: in the row's own hash, in the field <redis.meta.prefix>version, set by the same HSET as the columns (readers of the hash see that one extra field). key: in a marker key beside the row, so the hash holds exactly the row's columns, at the cost of a second key to write per row (more Redis CPU and memory). A deleted row leaves an expiring marker key either way; json rows and streams always use marker keys. Switch from field to key only with a rebuild: key does not read versions kept in fields."},
		{Name: KeyWaitReplicas, Type: connect.TypeInt, Default: "0", HasDefault: true, Check: connect.AtLeast(0), Group: "Data", Importance: connect.Low,
			Doc: "After each batch, WAIT until this many replicas have it (a retriable error otherwise); 0: do not wait."},
		{Name: KeyWaitTimeout, Type: connect.TypeLong, Default: "1000", HasDefault: true, Check: connect.AtLeast(0), Group: "Data", Importance: connect.Low,
			Doc: "Milliseconds WAIT waits for the replicas."},
		{Name: KeyBatchSize, Type: connect.TypeInt, Default: "500", HasDefault: true, Check: connect.InRange(1, 100000), Group: "Connector", Importance: connect.Medium,
			Doc: "The most records one MULTI/EXEC transaction applies; a Write applies its chunks one after the other, preparing the next while one runs."},
		{Name: KeyMaxRetries, Type: connect.TypeInt, Default: "10", HasDefault: true, Check: connect.AtLeast(0), Group: "Connector", Importance: connect.Low,
			Doc: "How often a Write is retried after a connection error or a busy server (OOM, LOADING, BUSY, READONLY...) before it fails and the task is restarted from the last committed offsets."},
		{Name: KeyRetryBackoff, Type: connect.TypeLong, Default: "100", HasDefault: true, Check: connect.AtLeast(0), Group: "Connector", Importance: connect.Low,
			Doc: "Milliseconds before the first retry; each further retry waits twice as long (with jitter), up to retry.backoff.max.ms."},
		{Name: KeyRetryBackoffMx, Type: connect.TypeLong, Default: "10000", HasDefault: true, Check: connect.AtLeast(0), Group: "Connector", Importance: connect.Low,
			Doc: "The longest wait between two retries, in milliseconds."},
		{Name: KeyCleanupDelay, Type: connect.TypeLong, Default: "10000", HasDefault: true, Check: connect.AtLeast(0), Group: "Rebuild", Importance: connect.Low,
			Doc: "Milliseconds between a rebuild's switch and the deletion of the old generation's keys, so readers that looked up the pointer just before can finish."},
		ignored("linger.ms", "each Write is applied before it returns; batches come from the runtime (consumer.override.max.poll.records)."),
		ignored("redis.multiexec", "each chunk of records is one MULTI/EXEC transaction already."),
		ignored("redis.pool", "the sink uses one connection at a time."),
		ignored("redis.charset", "keys and values are written as UTF-8."),
		ignored("redis.key.password", "use an unencrypted key file."),
	}
}

// Plugin returns the Redis sink plugin.
func Plugin() connect.Plugin {
	return connect.Plugin{
		Name:    "redis",
		Aliases: []string{"com.redis.kafka.connect.RedisSinkConnector"},
		Kind:    connect.KindSink,
		Version: "1.0.0",
		Doc:     "Maintains a Redis keyspace (hashes, JSON strings or streams) as a view of change-event topics: version-guarded writes and deletes, partial updates, zero-downtime rebuilds.",
		Config:  configDef(),
		NewSink: func(cfg connect.Config, env connect.Env) (connect.Sink, error) {
			return New(cfg, env)
		},
	}
}

func checkURI(v string) error {
	if _, err := goredis.ParseURL(strings.TrimSpace(v)); err != nil {
		return fmt.Errorf("must be a redis:// or rediss:// URI: %v", err)
	}
	return nil
}

func checkFalse(v string) error {
	if strings.EqualFold(strings.TrimSpace(v), "true") {
		return fmt.Errorf("Redis Cluster is not supported (got true)")
	}
	return nil
}

var keyPlaceholders = []string{"topic", "db", "schema", "table", "key", "key."}

func checkKeyTemplate(v string) error {
	_, err := change.ParseTemplate(strings.TrimSpace(v), keyPlaceholders...)
	return err
}

func checkMetaPrefix(v string) error {
	_, err := change.ParseTemplate(strings.TrimSpace(v), "connector")
	return err
}

// options is a validated configuration.
type options struct {
	client      *goredis.Options
	typ         string
	key         change.Template
	ttl         int64
	markerTTL   int64
	maxLen      int64
	meta        string
	waitN       int
	waitTimeout time.Duration
	batchSize   int
	maxRetries  int
	backoff     time.Duration
	backoffMax  time.Duration
	cleanDelay  time.Duration
	cacheSize   int
	connector   string
	// vfield is the hash field that holds a row's version marker (redis.version.storage=field
	// and redis.type=hash); "": marker keys only (the default).
	vfield string
}

func parseOptions(cfg connect.Config, env connect.Env) (*options, error) {
	o := &options{
		typ:         strings.ToLower(cfg.Enum(KeyType)),
		ttl:         cfg.Int(KeyTTL),
		markerTTL:   cfg.Int(KeyMarkerTTL),
		maxLen:      cfg.Int(KeyStreamMaxLen),
		waitN:       int(cfg.Int(KeyWaitReplicas)),
		waitTimeout: cfg.Millis(KeyWaitTimeout),
		batchSize:   int(cfg.Int(KeyBatchSize)),
		maxRetries:  int(cfg.Int(KeyMaxRetries)),
		backoff:     cfg.Millis(KeyRetryBackoff),
		backoffMax:  cfg.Millis(KeyRetryBackoffMx),
		cleanDelay:  cfg.Millis(KeyCleanupDelay),
		cacheSize:   int(cfg.Int(KeyVersionCache)),
		connector:   env.Connector,
	}
	if o.typ == "string" {
		o.typ = TypeJSON
	}
	var err error
	if o.client, err = clientOptions(cfg); err != nil {
		return nil, connect.Permanent(err)
	}
	tmpl := strings.TrimSpace(cfg.String(KeyKey))
	switch {
	case tmpl != "":
	case strings.TrimSpace(cfg.String(KeyKeyspace)) != "":
		tmpl = strings.TrimSpace(cfg.String(KeyKeyspace)) + cfg.String(KeySeparator) + "${key}"
	case o.typ == TypeStream:
		tmpl = "${table}"
	default:
		tmpl = "${table}:${key}"
	}
	if o.key, err = change.ParseTemplate(tmpl, keyPlaceholders...); err != nil {
		return nil, connect.Permanentf("%s: %w", KeyKey, err)
	}
	metaTmpl := strings.TrimSpace(cfg.String(KeyMetaPrefix))
	if metaTmpl == "" {
		metaTmpl = "__sluice:${connector}:"
	}
	meta, err := change.ParseTemplate(metaTmpl, "connector")
	if err != nil {
		return nil, connect.Permanentf("%s: %w", KeyMetaPrefix, err)
	}
	b, _ := meta.Render(nil, func(dst []byte, ph string) ([]byte, error) { return append(dst, env.Connector...), nil })
	o.meta = string(b)
	if o.typ == TypeHash && strings.ToLower(cfg.Enum(KeyVersionStore)) == StoreField {
		o.vfield = o.meta + "version"
	}
	return o, nil
}

// clientOptions builds go-redis options from redis.uri or redis.host and the other keys.
func clientOptions(cfg connect.Config) (*goredis.Options, error) {
	var co *goredis.Options
	if h := cfg.String(KeyHost); h != "" {
		co = &goredis.Options{Addr: h + ":" + strconv.Itoa(int(cfg.Int(KeyPort)))}
	} else {
		var err error
		if co, err = goredis.ParseURL(cfg.String(KeyURI)); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyURI, err)
		}
	}
	if u := cfg.String(KeyUsername); u != "" {
		co.Username = u
	}
	if p := cfg.String(KeyPassword); p != "" {
		co.Password = p
	}
	if db := cfg.Int(KeyDatabase); db >= 0 {
		co.DB = int(db)
	}
	if cfg.Bool(KeyTLS) && co.TLSConfig == nil {
		co.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if co.TLSConfig != nil {
		co.TLSConfig.InsecureSkipVerify = cfg.Bool(KeyInsecure) //nolint:gosec // the operator's choice
		if p := cfg.String(KeyCACert); p != "" {
			pem, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", KeyCACert, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no PEM certificate found in %s", KeyCACert, p)
			}
			co.TLSConfig.RootCAs = pool
		}
		if c := cfg.String(KeyClientCert); c != "" {
			cert, err := tls.LoadX509KeyPair(c, cfg.String(KeyClientKey))
			if err != nil {
				return nil, fmt.Errorf("%s / %s: %w", KeyClientCert, KeyClientKey, err)
			}
			co.TLSConfig.Certificates = []tls.Certificate{cert}
		}
	}
	timeout := time.Duration(cfg.Int(KeyTimeout)) * time.Second
	co.DialTimeout, co.ReadTimeout, co.WriteTimeout = timeout, timeout, timeout
	co.MaxRetries = -1 // the sink retries whole batches, with its own backoff
	co.PoolSize = 4
	co.DisableIdentity = true
	co.Protocol = 2 // RESP3's push notifications are not used, and checking for them costs per reply
	return co, nil
}
