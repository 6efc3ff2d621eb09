package elasticsearch

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sinks/internal/change"
)

// Configuration keys, with the Confluent Elasticsearch sink's names where it has one.
const (
	KeyURL               = "connection.url"
	KeyUsername          = "connection.username"
	KeyPassword          = "connection.password"
	KeyAPIKey            = "connection.api.key"
	KeyCompression       = "connection.compression"
	KeyConnectTimeout    = "connection.timeout.ms"
	KeyReadTimeout       = "read.timeout.ms"
	KeyIdleTime          = "max.connection.idle.time.ms"
	KeySecurityProtocol  = "elastic.security.protocol"
	KeyTrustStore        = "elastic.https.ssl.truststore.location"
	KeyTrustStoreType    = "elastic.https.ssl.truststore.type"
	KeyKeyStore          = "elastic.https.ssl.keystore.location"
	KeyKeyStoreType      = "elastic.https.ssl.keystore.type"
	KeyEndpointAlgorithm = "elastic.https.ssl.endpoint.identification.algorithm"
	KeyProxyHost         = "proxy.host"
	KeyProxyPort         = "proxy.port"
	KeyProxyUsername     = "proxy.username"
	KeyProxyPassword     = "proxy.password"
	KeyIndex             = "index"
	KeyKeyIgnore         = "key.ignore"
	KeyNullValues        = "behavior.on.null.values"
	KeyMalformed         = "behavior.on.malformed.documents"
	KeyBatchSize         = "batch.size"
	KeyBulkSizeBytes     = "bulk.size.bytes"
	KeyMaxInFlight       = "max.in.flight.requests"
	KeyMaxRetries        = "max.retries"
	KeyRetryBackoff      = "retry.backoff.ms"
	KeyIndexMappings     = "index.mappings"
	KeyIndexSettings     = "index.settings"
	KeyWriteMethod       = "write.method"
	KeyDataStreamType    = "data.stream.type"
	KeyRetryBackoffMax   = "retry.backoff.max.ms"
	KeyDropDelay         = "rebuild.drop.delay.ms"
)

// Values of behavior.on.null.values, behavior.on.malformed.documents and write.method.
const (
	NullDelete = "delete"
	NullIgnore = "ignore"
	NullFail   = "fail"

	MalformedDLQ    = "dlq"
	MalformedFail   = "fail"
	MalformedWarn   = "warn"
	MalformedIgnore = "ignore"

	WriteIndex  = "index"
	WriteUpsert = "upsert"
)

func ignored(name, doc string) connect.ConfigKey {
	return connect.ConfigKey{Name: name, Type: connect.TypeString, Ignored: true, Doc: doc, Group: "Ignored", Importance: connect.Low}
}

func configDef() connect.ConfigDef {
	return connect.ConfigDef{
		{Name: KeyURL, Type: connect.TypeList, Required: true, Group: "Connector", Importance: connect.High, Check: checkURLs,
			Doc: "Elasticsearch HTTP URLs, comma-separated (http://host:9200 or https://host:9200)."},
		{Name: KeyUsername, Type: connect.TypeString, Group: "Connector", Importance: connect.Medium,
			Doc: "User for HTTP basic authentication; empty: none."},
		{Name: KeyPassword, Type: connect.TypePassword, Group: "Connector", Importance: connect.Medium,
			Doc: "Password for HTTP basic authentication."},
		{Name: KeyAPIKey, Type: connect.TypePassword, Group: "Connector", Importance: connect.Medium,
			Doc: "An Elasticsearch API key (the base64 'id:key' token); when set it is used instead of the user and password."},
		{Name: KeyCompression, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Connector", Importance: connect.Low,
			Doc: "Gzip the request bodies."},
		{Name: KeyConnectTimeout, Type: connect.TypeInt, Default: "1000", HasDefault: true, Check: connect.AtLeast(1), Group: "Connector", Importance: connect.Low,
			Doc: "Milliseconds to wait for a TCP (and TLS) connection."},
		{Name: KeyReadTimeout, Type: connect.TypeInt, Default: "30000", HasDefault: true, Check: connect.AtLeast(1), Group: "Connector", Importance: connect.Low,
			Doc: "Milliseconds to wait for one response; a timeout is retried like a 5xx. Confluent's default is 3000; sluice's is longer because a bulk request is retried whole when it times out."},
		{Name: KeyIdleTime, Type: connect.TypeInt, Default: "60000", HasDefault: true, Check: connect.AtLeast(1), Group: "Connector", Importance: connect.Low,
			Doc: "Milliseconds an idle connection is kept for reuse."},
		{Name: KeySecurityProtocol, Type: connect.TypeString, Default: "PLAINTEXT", HasDefault: true, Enum: []string{"PLAINTEXT", "SSL"}, Group: "Security", Importance: connect.Medium,
			Doc: "SSL verifies the server with the trust store below (https:// URLs use TLS either way)."},
		{Name: KeyTrustStore, Type: connect.TypeString, Group: "Security", Importance: connect.Medium,
			Doc: "A PEM file of CA certificates that sign the server's certificate; empty: the system's."},
		{Name: KeyTrustStoreType, Type: connect.TypeString, Default: "PEM", HasDefault: true, Enum: []string{"PEM"}, Group: "Security", Importance: connect.Low,
			Doc: "The trust store's format; sluice reads PEM only (convert a JKS or PKCS12 store with keytool and openssl)."},
		{Name: KeyKeyStore, Type: connect.TypeString, Group: "Security", Importance: connect.Medium,
			Doc: "A PEM file holding the client certificate and its private key, for TLS client authentication; empty: none."},
		{Name: KeyKeyStoreType, Type: connect.TypeString, Default: "PEM", HasDefault: true, Enum: []string{"PEM"}, Group: "Security", Importance: connect.Low,
			Doc: "The key store's format; sluice reads PEM only."},
		{Name: KeyEndpointAlgorithm, Type: connect.TypeString, Default: "https", HasDefault: true, Group: "Security", Importance: connect.Low,
			Doc: "https checks that the server certificate names the host; empty turns the check off (not recommended)."},
		{Name: KeyProxyHost, Type: connect.TypeString, Group: "Proxy", Importance: connect.Low,
			Doc: "An HTTP proxy to reach Elasticsearch through; empty: none."},
		{Name: KeyProxyPort, Type: connect.TypeInt, Default: "8080", HasDefault: true, Check: connect.InRange(1, 65535), Group: "Proxy", Importance: connect.Low,
			Doc: "The proxy's port."},
		{Name: KeyProxyUsername, Type: connect.TypeString, Group: "Proxy", Importance: connect.Low,
			Doc: "User for the proxy's basic authentication."},
		{Name: KeyProxyPassword, Type: connect.TypePassword, Group: "Proxy", Importance: connect.Low,
			Doc: "Password for the proxy's basic authentication."},
		{Name: KeyIndex, Type: connect.TypeString, Default: "${topic}", HasDefault: true, Group: "Data Conversion", Importance: connect.High, Check: checkIndexTemplate,
			Doc: "The index (an alias, see rebuilds) a record is written to, a template: ${topic}, and ${db} / ${schema} (the topic's second-to-last dot-separated part) and ${table} (its last part). Rendered in lower case."},
		{Name: KeyKeyIgnore, Type: connect.TypeBoolean, Default: "false", HasDefault: true, Group: "Data Conversion", Importance: connect.High,
			Doc: "true: ignore record keys and use topic+partition+offset as the document id (an append-only index: no version guard, no deletes)."},
		{Name: KeyNullValues, Type: connect.TypeString, Default: NullDelete, HasDefault: true, Enum: []string{NullDelete, NullIgnore, NullFail}, Group: "Data Conversion", Importance: connect.Low,
			Doc: "What a record with a null value (a tombstone) does: delete deletes the document, ignore skips it, fail rejects it as a malformed record. Confluent's default is fail; a view needs delete."},
		{Name: KeyMalformed, Type: connect.TypeString, Default: MalformedDLQ, HasDefault: true, Enum: []string{MalformedDLQ, MalformedFail, MalformedWarn, MalformedIgnore}, Group: "Data Conversion", Importance: connect.Low,
			Doc: "What a record Elasticsearch rejects for good (mapping errors, malformed documents) or that cannot become a document does: dlq hands it to errors.tolerance (dead-letter topic under all, task failure under none), fail fails the task, warn logs and skips it, ignore skips it."},
		{Name: KeyWriteMethod, Type: connect.TypeString, Default: WriteIndex, HasDefault: true, Enum: []string{WriteIndex, "insert", WriteUpsert}, Group: "Data Conversion", Importance: connect.Low,
			Doc: "index (Confluent's insert) replaces the document with the row; upsert merges the row's fields into the stored document, keeping fields the row does not have."},
		{Name: KeyIndexMappings, Type: connect.TypeString, Group: "Data Conversion", Importance: connect.Medium, Check: checkJSONObject,
			Doc: "The mappings (JSON object, as in the create index API) of indices the sink creates; empty: dynamic mapping."},
		{Name: KeyIndexSettings, Type: connect.TypeString, Group: "Data Conversion", Importance: connect.Medium, Check: checkJSONObject,
			Doc: "The settings (JSON object) of indices the sink creates, e.g. {\"number_of_shards\":1,\"index.gc_deletes\":\"1h\"}."},
		{Name: KeyBatchSize, Type: connect.TypeInt, Default: "2000", HasDefault: true, Check: connect.InRange(1, 1000000), Group: "Connector", Importance: connect.Medium,
			Doc: "The most records in one bulk request."},
		{Name: KeyBulkSizeBytes, Type: connect.TypeLong, Default: "5242880", HasDefault: true, Check: connect.AtLeast(1024), Group: "Connector", Importance: connect.Low,
			Doc: "The most bytes in one bulk request body (a single larger document is sent alone)."},
		{Name: KeyMaxInFlight, Type: connect.TypeInt, Default: "5", HasDefault: true, Check: connect.InRange(1, 1000), Group: "Connector", Importance: connect.Medium,
			Doc: "The most bulk requests in flight at once. Documents are spread over this many lanes by id, so the changes of one document are always sent in order."},
		{Name: KeyMaxRetries, Type: connect.TypeInt, Default: "5", HasDefault: true, Check: connect.AtLeast(0), Group: "Connector", Importance: connect.Low,
			Doc: "How often an item refused with 429 or 5xx (or a failed request) is retried before Write fails and the task is restarted from the last committed offsets."},
		{Name: KeyRetryBackoff, Type: connect.TypeLong, Default: "100", HasDefault: true, Check: connect.AtLeast(0), Group: "Connector", Importance: connect.Low,
			Doc: "Milliseconds before the first retry; each further retry waits twice as long (with jitter), up to retry.backoff.max.ms."},
		{Name: KeyRetryBackoffMax, Type: connect.TypeLong, Default: "10000", HasDefault: true, Check: connect.AtLeast(0), Group: "Connector", Importance: connect.Low,
			Doc: "The longest wait between two retries, in milliseconds."},
		{Name: KeyDropDelay, Type: connect.TypeLong, Default: "10000", HasDefault: true, Check: connect.AtLeast(0), Group: "Rebuild", Importance: connect.Low,
			Doc: "Milliseconds between a rebuild's alias swap and the deletion of the old indices, so that searches that started on them can finish (the first Write after the delay, or Close, deletes them)."},
		{Name: KeyDataStreamType, Type: connect.TypeString, Default: "none", HasDefault: true, Enum: []string{"none"}, Group: "Data Stream", Importance: connect.Low,
			Doc: "Only none: a view is an index whose documents are updated and deleted, which data streams do not allow."},
		ignored("data.stream.dataset", "data streams are not supported (see data.stream.type)."),
		ignored("data.stream.timestamp.field", "data streams are not supported (see data.stream.type)."),
		ignored("linger.ms", "each Write is flushed before it returns; batches come from the runtime (consumer.override.max.poll.records)."),
		ignored("max.buffered.records", "each Write is flushed before it returns, so nothing is buffered between writes."),
		ignored("flush.timeout.ms", "each Write is flushed before it returns; retries are bounded by max.retries."),
		ignored("flush.synchronously", "each Write is flushed before it returns."),
		ignored("schema.ignore", "sluice's records carry no schema: mappings come from index.mappings or dynamic mapping."),
		ignored("topic.schema.ignore", "sluice's records carry no schema."),
		ignored("topic.key.ignore", "use key.ignore, or one connector per key handling."),
		ignored("compact.map.entries", "sluice's records carry no map schema: objects are written as objects."),
		ignored("drop.invalid.message", "use behavior.on.malformed.documents."),
		ignored("use.autogenerated.ids", "document ids come from the key, or from topic+partition+offset with key.ignore."),
		ignored("external.version.header", "the version guard always uses the record's version (__sluice.version)."),
		ignored("log.sensitive.data", "rejected documents are never logged; their error goes to the dead-letter topic."),
		ignored("elastic.https.ssl.truststore.password", "trust stores are PEM files, which have no password."),
		ignored("elastic.https.ssl.keystore.password", "key stores are PEM files; use an unencrypted key."),
		ignored("elastic.https.ssl.key.password", "key stores are PEM files; use an unencrypted key."),
		ignored("connection.retry.backoff.ms", "see retry.backoff.ms."),
	}
}

// Plugin returns the Elasticsearch sink plugin.
func Plugin() connect.Plugin {
	return connect.Plugin{
		Name:    "elasticsearch",
		Aliases: []string{"io.confluent.connect.elasticsearch.ElasticsearchSinkConnector"},
		Kind:    connect.KindSink,
		Version: "1.0.0",
		Doc:     "Maintains Elasticsearch indices as views of change-event topics: version-guarded writes and deletes, partial updates, zero-downtime rebuilds.",
		Config:  configDef(),
		NewSink: func(cfg connect.Config, env connect.Env) (connect.Sink, error) {
			return New(cfg, env)
		},
	}
}

func checkURLs(v string) error {
	for _, s := range connect.SplitList(v) {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("must be http:// or https:// URLs (got %q)", s)
		}
	}
	return nil
}

func checkJSONObject(v string) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return fmt.Errorf("must be a JSON object: %v", err)
	}
	return nil
}

var indexPlaceholders = []string{"topic", "db", "schema", "table"}

func checkIndexTemplate(v string) error {
	t, err := change.ParseTemplate(strings.TrimSpace(v), indexPlaceholders...)
	if err != nil {
		return err
	}
	if t.Static() {
		return checkIndexName(strings.ToLower(strings.TrimSpace(v)))
	}
	return nil
}

// checkIndexName applies Elasticsearch's rules for index names (and sluice's: the versioned
// index <name>_v<n> must fit too).
func checkIndexName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("index name is empty")
	case len(name) > 240:
		return fmt.Errorf("index name %q is longer than 240 bytes", name)
	case name == "." || name == "..":
		return fmt.Errorf("index name %q is not allowed", name)
	case strings.ContainsAny(name[:1], "-_+"):
		return fmt.Errorf("index name %q must not start with -, _ or +", name)
	case strings.ContainsAny(name, "\\/*?\"<>| ,#:"):
		return fmt.Errorf("index name %q must not contain \\ / * ? \" < > | space , # :", name)
	}
	return nil
}

// options is a validated configuration.
type options struct {
	urls          []string
	username      string
	password      string
	apiKey        string
	compression   bool
	connTimeout   time.Duration
	readTimeout   time.Duration
	idleTime      time.Duration
	tls           bool
	caCert        []byte
	clientPEM     []byte
	skipVerify    bool
	proxy         *url.URL
	index         change.Template
	keyIgnore     bool
	nullValues    string
	malformed     string
	upsert        bool
	mappings      json.RawMessage
	settings      json.RawMessage
	batchSize     int
	bulkBytes     int
	inFlight      int
	maxRetries    int
	backoff       time.Duration
	backoffMax    time.Duration
	dropDelay     time.Duration
	connectorName string
}

func parseOptions(cfg connect.Config, env connect.Env) (*options, error) {
	o := &options{
		urls:          cfg.List(KeyURL),
		username:      cfg.String(KeyUsername),
		password:      cfg.String(KeyPassword),
		apiKey:        cfg.String(KeyAPIKey),
		compression:   cfg.Bool(KeyCompression),
		connTimeout:   cfg.Millis(KeyConnectTimeout),
		readTimeout:   cfg.Millis(KeyReadTimeout),
		idleTime:      cfg.Millis(KeyIdleTime),
		tls:           cfg.Enum(KeySecurityProtocol) == "SSL",
		skipVerify:    cfg.String(KeyEndpointAlgorithm) == "",
		keyIgnore:     cfg.Bool(KeyKeyIgnore),
		nullValues:    cfg.Enum(KeyNullValues),
		malformed:     cfg.Enum(KeyMalformed),
		upsert:        cfg.Enum(KeyWriteMethod) == WriteUpsert,
		batchSize:     int(cfg.Int(KeyBatchSize)),
		bulkBytes:     int(cfg.Int(KeyBulkSizeBytes)),
		inFlight:      int(cfg.Int(KeyMaxInFlight)),
		maxRetries:    int(cfg.Int(KeyMaxRetries)),
		backoff:       cfg.Millis(KeyRetryBackoff),
		backoffMax:    cfg.Millis(KeyRetryBackoffMax),
		dropDelay:     cfg.Millis(KeyDropDelay),
		connectorName: env.Connector,
	}
	if len(o.urls) == 0 {
		return nil, connect.Permanentf("%s: is required", KeyURL)
	}
	var err error
	if o.index, err = change.ParseTemplate(strings.TrimSpace(cfg.String(KeyIndex)), indexPlaceholders...); err != nil {
		return nil, connect.Permanentf("%s: %w", KeyIndex, err)
	}
	if s := cfg.String(KeyIndexMappings); s != "" {
		o.mappings = json.RawMessage(s)
	}
	if s := cfg.String(KeyIndexSettings); s != "" {
		o.settings = json.RawMessage(s)
	}
	if p := cfg.String(KeyTrustStore); p != "" {
		if o.caCert, err = os.ReadFile(p); err != nil {
			return nil, connect.Permanentf("%s: %w", KeyTrustStore, err)
		}
	}
	if p := cfg.String(KeyKeyStore); p != "" {
		if o.clientPEM, err = os.ReadFile(p); err != nil {
			return nil, connect.Permanentf("%s: %w", KeyKeyStore, err)
		}
	}
	if h := cfg.String(KeyProxyHost); h != "" {
		o.proxy = &url.URL{Scheme: "http", Host: fmt.Sprintf("%s:%d", h, cfg.Int(KeyProxyPort))}
		if u := cfg.String(KeyProxyUsername); u != "" {
			o.proxy.User = url.UserPassword(u, cfg.String(KeyProxyPassword))
		}
	}
	return o, nil
}
