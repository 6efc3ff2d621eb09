package postgres

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

func parse(raw map[string]string) (connect.Config, []connect.FieldError) {
	return Plugin().ParseConfig(raw)
}

func minimal() map[string]string {
	return map[string]string{
		KeyHostname: "db", KeyUser: "cdc", KeyDBName: "inventory", KeyTopicPrefix: "pg",
	}
}

// A Debezium PostgreSQL connector config, as pasted from a Kafka Connect setup, loads; its
// keys without meaning in sluice are accepted and ignored.
func TestDebeziumConfigLoads(t *testing.T) {
	raw := map[string]string{
		"database.hostname":                         "postgres",
		"database.port":                             "5432",
		"database.user":                             "postgres",
		"database.password":                         "postgres",
		"database.dbname":                           "inventory",
		"topic.prefix":                              "dbserver1",
		"plugin.name":                               "pgoutput",
		"slot.name":                                 "debezium",
		"publication.name":                          "dbz_publication",
		"publication.autocreate.mode":               "filtered",
		"table.include.list":                        "inventory.customers,inventory.orders",
		"snapshot.mode":                             "initial",
		"tombstones.on.delete":                      "true",
		"decimal.handling.mode":                     "string",
		"time.precision.mode":                       "adaptive_time_microseconds",
		"schema.history.internal.kafka.topic":       "schema-changes.inventory",
		"database.history.kafka.bootstrap.servers":  "kafka:9092",
		"snapshot.max.threads":                      "4",
		"include.unknown.datatypes":                 "true",
		"message.key.columns":                       "inventory.logs:ts,host;inventory\\.audit.*:id",
		"column.mask.with.8.chars":                  "inventory.customers.ssn",
		"column.mask.hash.SHA-256.with.salt.pepper": "inventory.customers.email",
		"column.truncate.to.4.chars":                "inventory.customers.note",
		"replica.identity.autoset.values":           "inventory.logs:FULL,inventory.audit:INDEX audit_pk",
	}
	cfg, errs := parse(raw)
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	set, err := settingsFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !set.filter.table("inventory", "customers") || set.filter.table("inventory", "products") || !set.filter.table("INVENTORY", "Orders") {
		t.Error("table.include.list: want customers and orders (any case), not products")
	}
	if got := set.keyColumnsFor("inventory", "audit_2024"); !cmp.Equal(got, []string{"id"}) {
		t.Errorf("message.key.columns for audit_2024 = %v", got)
	}
	if got := set.keyColumnsFor("inventory", "logs"); !cmp.Equal(got, []string{"ts", "host"}) {
		t.Errorf("message.key.columns for logs = %v", got)
	}
	if len(set.identityAutoset) != 2 || set.identityAutoset[1].identity != `USING INDEX "audit_pk"` {
		t.Errorf("identity autoset = %+v", set.identityAutoset)
	}
	ms := set.masksFor("inventory", "customers", "ssn")
	if len(ms) != 1 || ms[0].apply("123-45-6789") != "********" {
		t.Errorf("mask of ssn: %+v", ms)
	}
	hs := set.masksFor("inventory", "customers", "email")
	if len(hs) != 1 || hs[0].apply("a@b.c") != "0430ccee28a2ef77a5405f545d9fdcd5f34a6a949517df97fd8722289ffa1f33" {
		t.Errorf("hash of email: %+v", hs)
	}
	if got := set.masksFor("inventory", "customers", "note")[0].apply("añbcdef"); got != "añbc" {
		t.Errorf("truncate = %q, want %q", got, "añbc")
	}
	if set.decimalMode != "string" || set.timeMode != "adaptive_time_microseconds" || set.pubMode != PublicationFiltered {
		t.Errorf("modes: %s %s %s", set.decimalMode, set.timeMode, set.pubMode)
	}
}

// Every problem is reported at once, with its key and what is wrong.
func TestConfigErrors(t *testing.T) {
	raw := map[string]string{
		KeyHostname: "db", KeyDBName: "x", // no user, no topic.prefix
		KeyPort:              "70000",
		KeySnapshotMode:      "sometimes",
		KeyTableInclude:      "public.(a",
		KeyTableExclude:      "public.b",
		KeySchemaInclude:     "public",
		KeySchemaExclude:     "private",
		KeySlotName:          "Bad-Slot",
		KeyMessageKeyColumns: "public.t",
		KeySkippedOps:        "c,none",
		KeyProtocolVersion:   "3",
		"database.hostnam":   "typo",
	}
	_, errs := parse(raw)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`database.hostnam: unknown key; did you mean "database.hostname"?`,
		`database.port: must be 1..65535 (got 70000)`,
		`database.user: is required (role to connect as)`,
		`pgoutput.protocol.version: must be one of 1, 2 (got "3")`,
		`slot.name: must use only a-z 0-9 _ (got "Bad-Slot")`,
		`snapshot.mode: must be one of initial, initial_only, no_data, when_needed, never (got "sometimes")`,
		"table.include.list: bad regular expression \"public.(a\": error parsing regexp: missing closing ): `(?i)^(?:public.(a)$`",
		`topic.prefix: is required (the logical name of the server: the prefix of every topic name and the name in each event's source block)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("field errors (-want +got):\n%s", diff)
	}
	// cross-key rules (checked once every key passed its own checks)
	raw = minimal()
	raw[KeyTableInclude] = "public.a"
	raw[KeyTableExclude] = "public.b"
	raw[KeySchemaInclude] = "public"
	raw[KeySchemaExclude] = "x"
	raw[KeyMessageKeyColumns] = "public.t"
	raw[KeySkippedOps] = "c,none"
	raw["column.mask.hash.CRC32.with.salt.s"] = "a.b.c"
	raw["column.mask.with.x.chars"] = "a.b.c"
	_, errs = parse(raw)
	got = nil
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want = []string{
		`column.mask.hash.CRC32.with.salt.s: hash algorithm must be MD5, SHA-1, SHA-256, SHA-384 or SHA-512 (got "CRC32")`,
		`column.mask.with.x.chars: want column.mask.with.<n>.chars`,
		`message.key.columns: want <table regex>:<column>[,<column>...] entries separated by ';' (got "public.t")`,
		`schema.exclude.list: must not be set together with schema.include.list`,
		`skipped.operations: none must stand alone (got "c,none")`,
		`table.exclude.list: must not be set together with table.include.list`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cross-key errors (-want +got):\n%s", diff)
	}
}

func TestPluginMetadata(t *testing.T) {
	p := Plugin()
	if p.Class() != "io.debezium.connector.postgresql.PostgresConnector" || p.Name != "postgres" || p.Kind != connect.KindSource {
		t.Fatalf("plugin %s %s %s", p.Name, p.Class(), p.Kind)
	}
	if !p.Config.IsSecret(KeyPassword) {
		t.Error("database.password must be secret")
	}
	for _, k := range p.Config {
		if k.Doc == "" {
			t.Errorf("%s has no doc", k.Name)
		}
		if !k.Required && !k.HasDefault && !k.Prefix && !k.Ignored {
			t.Errorf("%s has neither a default nor Required", k.Name)
		}
		if strings.HasPrefix(k.Name, "transforms") || strings.HasPrefix(k.Name, "errors.") {
			t.Errorf("%s is a runtime key", k.Name)
		}
	}
}
