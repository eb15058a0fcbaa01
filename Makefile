# Taskhoster: build, run the bundled example, test, fuzz.
#
#   make run                  serve examples/hosts on 127.0.0.1:8080 (admin 127.0.0.1:9090;
#                             other ports: make run RUN_ADDR=127.0.0.1:8081 RUN_ADMIN_ADDR=127.0.0.1:9091)
#   make test                 vet and staticcheck, then every test with the race detector
#   make fuzz FUZZTIME=2m     every Fuzz target, one after the other
#   make faults FAULT_CYCLES=100  kill -9 the server that often under load, then
#                             check no task was lost or finished twice
#   make bench                measure this build (BENCHMARKS.md); bench-peers: vs beanstalkd, River
#   make test-js, test-python the TypeScript and Python clients' tests against the binary (make test runs both)
#   make release              bin/release/taskhoster: static, reproducible, version stamped
#   make install              the binary and the systemd unit (PREFIX, DESTDIR)
#   make docker               the release binary on an empty image (IMAGE=taskhoster:VERSION)

GO       ?= go
FUZZTIME ?= 30s
BIN      := bin/taskhoster

# The Go toolchain's usual home, for shells that do not have it on PATH.
export PATH := $(PATH):/usr/local/go/bin

.PHONY: build run test fuzz faults bench bench-peers clean test-python release install docker

build:
	$(GO) build -o $(BIN) ./cmd/taskhoster

# Where make run listens: the API, and the admin listener (/metrics,
# /healthz), whose default 127.0.0.1:9090 is also Prometheus's.
RUN_ADDR       ?= 127.0.0.1:8080
RUN_ADMIN_ADDR ?= 127.0.0.1:9090

run: build
	$(BIN) serve --hosts examples/hosts --items var/taskhoster-items --logs var/taskhoster-logs --addr $(RUN_ADDR) --admin-addr $(RUN_ADMIN_ADDR)

# Plain `go test` also runs every Fuzz target over its seed corpus (the f.Add
# values and testdata/fuzz/), so the corpora are part of `make test`. The
# PostgreSQL store's tests (adapters/postgres) start a throwaway cluster from
# Debian's server binaries; without them they skip, and this says so first.
test:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || \
		echo "make test: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): the adapters/postgres tests SKIP; install postgresql, as .ci/run does"
	@command -v systemd-analyze >/dev/null 2>&1 || \
		echo "make test: SKIP: systemd-analyze is not installed: the systemd unit (tests/packaging) is not verified"
	@docker info >/dev/null 2>&1 || \
		echo "make test: SKIP: no working container runtime (docker info fails): tests/packaging does not build or run the image"
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	cd bench/schedtrace && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	@$(MAKE) --no-print-directory test-js
	@$(MAKE) --no-print-directory test-python

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
# beanstalkd (apt-get installs it if missing), fsfloor and, when
# PostgreSQL's binaries are installed, River on a throwaway cluster
# (BENCH_RIVER=0 skips it), on both discs, at P = W = 32 with one claim in
# flight per worker and with four, batch posts of 100 beside River's
# InsertMany of 100, with the ratios.
bench-peers: build
	scripts/bench.sh --peers $(BENCH_FLAGS)

# The Python client's unittest suite; each test starts the binary built
# here (TASKHOSTER_BIN). It needs Python 3.11 or later and nothing else;
# then mypy --strict checks its type hints, where mypy is installed.
PYTHON ?= python3
test-python: build
	@if ! $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "make test-python: SKIP: no Python 3.11 or later ($(PYTHON)): the Python client (clients/python) is not tested; install python3, as .ci/run does"; \
	else \
		cd clients/python && TASKHOSTER_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m unittest discover -s tests -t . ; \
	fi
	@if command -v mypy >/dev/null 2>&1; then \
		cd clients/python && mypy --strict taskhoster tests; \
	else \
		echo "make test-python: SKIP: mypy is not installed: the Python client's type hints are not checked; install mypy, as .ci/run does"; \
	fi

# The release build: a static binary (CGO_ENABLED=0, so it runs on an
# empty image) with the version and commit stamped in, built the same way
# from the same commit byte for byte (-trimpath, no build id).
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)
RELEASE_BIN ?= bin/release/taskhoster
RELEASE_LDFLAGS := -s -w -buildid= -X main.version=$(VERSION) -X main.commit=$(COMMIT)
release:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(RELEASE_LDFLAGS)" -o $(RELEASE_BIN) ./cmd/taskhoster

# Installs the release binary and the systemd unit, which serves
# /etc/taskhoster/hosts with its data in /var/lib/taskhoster as the system
# user taskhoster (created by systemd-sysusers when installing for real).
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
SYSCONFDIR ?= /etc
install: release
	install -D -m 0755 $(RELEASE_BIN) $(DESTDIR)$(BINDIR)/taskhoster
	install -d -m 0755 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(SYSCONFDIR)/taskhoster/hosts
	sed 's|@BINDIR@|$(BINDIR)|g' packaging/taskhoster.service.in > $(DESTDIR)$(UNITDIR)/taskhoster.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/taskhoster.service
	install -m 0644 packaging/taskhoster.sysusers $(DESTDIR)$(SYSUSERSDIR)/taskhoster.conf
	@if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null 2>&1; then \
		systemd-sysusers $(SYSUSERSDIR)/taskhoster.conf; \
		echo "installed; start it with: systemctl daemon-reload && systemctl enable --now taskhoster"; \
	fi

# The release binary on `FROM scratch`: no base image to pull.
DOCKER ?= docker
IMAGE  ?= taskhoster:$(VERSION)
docker: release
	$(DOCKER) build -t $(IMAGE) .

# Removes the binary and the data `make run` left in var/.
clean:
	rm -rf bin var
