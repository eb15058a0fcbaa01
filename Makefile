# Taskhoster: build, run the bundled example, test, fuzz.
#
#   make run                  serve examples/hosts on 127.0.0.1:8080
#   make test                 vet, then every test with the race detector
#   make fuzz FUZZTIME=2m     every Fuzz target, one after the other
#   make faults FAULT_CYCLES=100  kill -9 the server that often under load, then
#                             check no task was lost or finished twice
#   make bench                measure this build (BENCHMARKS.md); bench-peers: vs beanstalkd

GO       ?= go
FUZZTIME ?= 30s
BIN      := bin/taskhoster

# The Go toolchain's usual home, for shells that do not have it on PATH.
export PATH := $(PATH):/usr/local/go/bin

.PHONY: build run test fuzz faults bench bench-peers clean

build:
	$(GO) build -o $(BIN) ./cmd/taskhoster

run: build
	$(BIN) serve --hosts examples/hosts --items var/taskhoster-items --logs var/taskhoster-logs --addr 127.0.0.1:8080

# Plain `go test` also runs every Fuzz target over its seed corpus (the f.Add
# values and testdata/fuzz/), so the corpora are part of `make test`. The
# PostgreSQL store's tests (adapters/postgres) start a throwaway cluster from
# Debian's server binaries; without them they skip, and this says so first.
test:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || \
		echo "make test: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): the adapters/postgres tests SKIP; install postgresql, as .ci/run does"
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) test-js

# The TypeScript client (clients/js): installs its packages from the lock
# file when node_modules is missing, compiles it and runs its tests (node
# --test), which start $(BIN). Without Node 20 or later and npm they SKIP,
# and this says so.
NPM ?= npm
.PHONY: test-js
test-js: build
	@if ! command -v node >/dev/null 2>&1 || ! command -v $(NPM) >/dev/null 2>&1; then \
		echo "make test-js: node or npm is not installed: the JS client tests (clients/js) SKIP; install nodejs 20 or later and npm, as .ci/run does"; \
	elif ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then \
		echo "make test-js: node $$(node --version) is older than 20: the JS client tests (clients/js) SKIP; install nodejs 20 or later"; \
	else \
		cd clients/js && { [ -d node_modules ] || $(NPM) ci --no-audit --no-fund; } && TASKHOSTER_BIN=$(CURDIR)/$(BIN) $(NPM) test; \
	fi

# Runs each Fuzz target of each package for FUZZTIME (go test -fuzz takes one
# target at a time). A crasher is written to the package's testdata/fuzz/ and
# from then on is part of `make test`.
fuzz:
	@set -e; pkgs=$$($(GO) list ./...); \
	for pkg in $$pkgs; do \
		listed=$$($(GO) test -list '^Fuzz' $$pkg); \
		for target in $$listed; do \
			case $$target in Fuzz*) ;; *) continue ;; esac; \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# The fault harness (tests/faults) at length: FAULT_CYCLES SIGKILLs at random
# moments, each followed by a restart on the same folders and port, then a
# drain and a check of every client's history against the store and the
# event log (a second queue runs maxAttempts, backoff, delays, priorities
# and give-backs: no claim before its time, none past maxAttempts). `make test` runs the same test with 5 cycles. FAULT_SEED repeats
# a run's schedule of kills. Prints one summary line, "faults: ...".
FAULT_CYCLES ?= 50
faults:
	FAULT_CYCLES=$(FAULT_CYCLES) $(GO) test -race -count=1 -v -run '^TestFaults$$' -timeout 3h ./tests/faults

# Issue 6's benchmark (BENCHMARKS.md): `taskhoster bench` on the machine's
# own disc and, as root, on a journaled ext4 image scripts/bench.sh creates
# and removes. Reports go to var/bench/. BENCH_FLAGS passes flags to the
# bench, e.g. BENCH_FLAGS="-n 5000 -runs 1" for a quick look.
BENCH_FLAGS ?=
bench: build
	scripts/bench.sh $(BENCH_FLAGS)

# The same throughput workload, round by round, against Taskhoster,
# beanstalkd (apt-get installs it if missing) and fsfloor, on both discs,
# with the ratios.
bench-peers: build
	scripts/bench.sh --peers $(BENCH_FLAGS)

# Removes the binary and the data `make run` left in var/.
clean:
	rm -rf bin var
