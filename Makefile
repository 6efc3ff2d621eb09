# sluice: the two commands are `make quickstart` (the main job) and `make test` (every test).
# Both run `make setup` first, which installs what is missing on a fresh Debian machine (as root).

GO        ?= go
BIN       := bin/sluice
PKGS      := ./...
# 2 cores: at most two test binaries at a time.
TEST_P    ?= 2
TEST_FLAGS ?= -count=1 -timeout 40m

.PHONY: all setup build quickstart test vet race soak bench bench-go clean

all: build

setup:
	bash e2e/setup/setup.sh

build:
	$(GO) build -o $(BIN) ./cmd/sluice

# The example pipeline in the foreground: MariaDB and PostgreSQL -> Elasticsearch and Redis.
# QUICKSTART_FLAGS: e.g. -api 127.0.0.1:9083 or -dir ./quickstart-data.
quickstart: setup build
	$(GO) run ./e2e/quickstart -bin $(BIN) $(QUICKSTART_FLAGS)

vet:
	$(GO) vet $(PKGS)

# Packages with concurrency also run under the race detector.
race:
	$(GO) test -race $(TEST_FLAGS) ./connect/... ./transforms/... ./wal/ ./wal/raft/

test: setup vet
	$(GO) test -p $(TEST_P) $(TEST_FLAGS) $(PKGS)
	$(MAKE) race

# Long kill loops and soak runs (iteration counts raised through SLUICE_SOAK).
soak: setup
	SLUICE_SOAK=1 $(GO) test -p 1 -count=1 -timeout 3h $(PKGS)

# The end-to-end benchmark suite (e2e/bench): real servers, calibrated limits, the workloads
# W1-W5 and a parity check of every view; writes bench-out/report.md and report.json and fails
# if a view differs from its table. BENCH_FLAGS: e.g. -only W1,W2 -rows 200000 -duration 10s.
bench: setup build
	$(GO) run ./e2e/bench -bin $(BIN) -out bench-out $(BENCH_FLAGS)

# The package-level Go benchmarks.
bench-go: setup
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	rm -rf bin
