# wasmkeep alarms. `make demo` runs the demo; `make test` runs every test.
GO ?= go
VERSITYGW_VERSION := v1.8.0
STATICCHECK_VERSION := v0.8.2
# MinIO for make test-minio, from the Go module proxy (MinIO tags no Go
# module versions: this is its master of 2026-02-12).
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
GUEST_SOURCES := $(shell find guest-sdk examples/counter-actor -name '*.go' -o -name go.mod)
RUST_SOURCES := $(shell find guest-sdk-rust examples/counter-actor-rust -name '*.rs')
AS_SOURCES := $(shell find guest-sdk-as/assembly examples/counter-actor-as -name '*.ts') guest-sdk-as/asconfig.json guest-sdk-as/transform.mjs

# GUEST picks the counter actor's language for the demos: go, rust or as.
GUEST ?= go
COUNTER_go := build/counter-actor.wasm
COUNTER_rust := build/counter-actor-rust.wasm
COUNTER_as := build/counter-actor-as.wasm

.PHONY: soak soak-short test-minio demo demo-single demo-reminders test tools guest-tools guests lint testdata bench bench-failover bench-firings bench-sleep bench-million sim fuzz fuzz-short

# demo: three keepnode processes on an S3 endpoint; one is SIGKILLed and its
# alarms fire on the others. demo-says goes first: the builds after it
# print little for minutes the first time.
demo: demo-says $(COUNTER_$(GUEST)) tools
	$(GO) run ./cmd/demo -guest $(GUEST)

.PHONY: demo-says
demo-says:
	@echo "make demo: building the counter actor (GUEST=$(GUEST)), versitygw (the S3 server) and keepnode, then running three nodes;"
	@echo "           a first build takes several minutes (later ones are cached)"

# demo-single: the counter actor on one node, through a restart.
demo-single: $(COUNTER_$(GUEST))
	$(GO) run ./cmd/demo-single -guest $(GUEST)

# demo-reminders: the reminders actor (named timers, an interval, a cron
# digest) on one node, through a restart while a reminder falls due.
REMINDERS_go := build/reminders.wasm
REMINDERS_rust := build/reminders-rust.wasm
REMINDERS_as := build/reminders-as.wasm
demo-reminders: $(REMINDERS_$(GUEST))
	$(GO) run ./cmd/demo-reminders -guest $(GUEST)

# soak: the chaos soak (cmd/soak): 1,000 soak actors on three keepnode
# processes behind fault proxies, 100 SIGKILLs, then the whole history
# checked; soak-short: the same with 10 kills. SOAKFLAGS adds flags.
SOAKFLAGS ?=
soak: tools
	$(GO) run ./cmd/soak -kills 100 $(SOAKFLAGS)

soak-short: tools
	$(GO) run ./cmd/soak -kills 10 $(SOAKFLAGS)

# upgrade: the rolling upgrade (cmd/soak -upgrade-from, docs/upgrading.md):
# three nodes start on keepnode at UPGRADE_FROM (a commit or tag), are
# replaced one at a time by this tree's build and rolled back the same way,
# 1,000 soak actors, the whole history checked. Its short form, from the
# commit the test names, is in make test.
.PHONY: upgrade
UPGRADE_FROM ?=
upgrade: tools
	@test -n "$(UPGRADE_FROM)" || { echo "make upgrade: give the earlier build, UPGRADE_FROM=<commit or tag>" >&2; exit 2; }
	$(GO) run ./cmd/soak -upgrade-from $(UPGRADE_FROM) $(SOAKFLAGS)

# noisy: the noisy-neighbour measurement (cmd/noisy): tenant A's light load
# beside each of tenant B's (a request flood, a burst of alarms due at one
# instant, handlers that hang, spin or fail) on one node, A's lateness and
# reads against its own baseline, B's rate with A against alone, lease
# lapses; exits 1 past the bounds (docs/operations.md#tenants-on-one-node).
# noisy-short is the form CI runs (about 2 minutes). NOISYFLAGS adds flags.
.PHONY: noisy noisy-short
NOISYFLAGS ?=
noisy: tools
	$(GO) run ./cmd/noisy $(NOISYFLAGS)

noisy-short: tools
	$(GO) run ./cmd/noisy -short $(NOISYFLAGS)

# test-minio builds MinIO (MINIO_VERSION; about 16 minutes the first time
# on two cores, cached after) and runs the S3 conformance tests, the
# cluster tests, the index doctor's tests and soak-short against it
# (.ci/test-minio). MINIO_STEPS=bucket runs the conformance tests alone,
# as CI does.
MINIO_STEPS ?= all
test-minio: tools
	GO=$(GO) MINIO_VERSION=$(MINIO_VERSION) MINIO_STEPS=$(MINIO_STEPS) .ci/test-minio

# guests builds the counter actor in each language (Rust needs rustc with
# the wasm32-wasi standard library; AssemblyScript node and npm).
guests: $(COUNTER_go) $(COUNTER_rust) $(COUNTER_as)

build/counter-actor.wasm: $(GUEST_SOURCES)
	@mkdir -p build
	cd examples/counter-actor && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o ../../build/counter-actor.wasm .

build/counter-actor-rust.wasm: $(RUST_SOURCES)
	@mkdir -p build
	$(GO) run ./internal/guestbuild/buildguest rust examples/counter-actor-rust $@

build/counter-actor-as.wasm: guest-sdk-as/node_modules $(AS_SOURCES)
	@mkdir -p build
	$(GO) run ./internal/guestbuild/buildguest as examples/counter-actor-as/assembly/index.ts $@

# reminders builds the reminders example (named timers and a cron digest,
# docs/timers.md) in each language; its tests are in internal/testguest.
.PHONY: reminders
reminders: build/reminders.wasm build/reminders-rust.wasm build/reminders-as.wasm

build/reminders.wasm: $(shell find guest-sdk -name '*.go' -o -name go.mod)
	@mkdir -p build
	cd guest-sdk/examples/reminders && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o ../../../build/reminders.wasm .

build/reminders-rust.wasm: $(shell find guest-sdk-rust examples/reminders-rust -name '*.rs')
	@mkdir -p build
	$(GO) run ./internal/guestbuild/buildguest rust examples/reminders-rust $@

build/reminders-as.wasm: guest-sdk-as/node_modules $(shell find guest-sdk-as/assembly examples/reminders-as -name '*.ts') guest-sdk-as/asconfig.json guest-sdk-as/transform.mjs
	@mkdir -p build
	$(GO) run ./internal/guestbuild/buildguest as examples/reminders-as/assembly/index.ts $@

# guest-tools installs the AssemblyScript compiler from the lockfile. Rust
# and wabt come from the system's packages (Debian: apt-get install rustc
# libstd-rust-dev-wasm32 wabt); .ci/run installs them.
guest-tools: guest-sdk-as/node_modules

guest-sdk-as/node_modules: guest-sdk-as/package-lock.json
	@command -v npm >/dev/null || { echo "make guest-tools: npm not found; install Node.js and npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd guest-sdk-as && npm ci --no-audit --no-fund
	@touch $@

# extism-host: the Extism example, a module of its own (examples/extism-host,
# with the Extism SDK from the Go module proxy): vet, tidy, and its tests
# (the counter actor, the fixtures, the conformance kit, the backoff
# across a reopen, a looping handler stopped at its deadline).
.PHONY: extism-host
extism-host:
	cd examples/extism-host && $(GO) vet ./... && $(GO) mod tidy -diff && $(GO) test -count=1 ./...

# keepnode builds build/keepnode and build/keepctl, stamped with the
# checkout's version and commit (keepnode -version, wasmkeep_build_info)
# also where the build records none; image builds deploy/Dockerfile with
# the same stamp (its context has no .git).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
STAMP := -X github.com/wasmkeep/alarms/node.Version=$(VERSION) -X github.com/wasmkeep/alarms/node.Revision=$(REVISION)
.PHONY: keepnode image
keepnode:
	@mkdir -p build
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(STAMP)' -o build/keepnode ./cmd/keepnode
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(STAMP)' -o build/keepctl ./cmd/keepctl

image:
	docker build -f deploy/Dockerfile -t wasmkeep/keepnode --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) .

# tools installs the S3 server the tests run against (cached after the first time).
tools:
	$(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

test: tools
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...
	cd guest-sdk && $(GO) vet ./... && $(GO) test -count=1 ./...

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The fuzz targets, as package:Target. Each has a seed corpus under its
# package's testdata/fuzz/<Target>; a crash found is kept there.
FUZZ_TARGETS := alarmindex:FuzzParseKey cluster:FuzzHoldRecord cluster:FuzzLeaseRecord cluster:FuzzSnapshotKey \
	node:FuzzHTTPHandler node:FuzzRestoredSnapshot engine:FuzzHostFunctions hostmod:FuzzAlarmFunctionsOnATable \
	hostmod:FuzzAlarmFunctionsOutOfTurn
FUZZTIME ?= 5m
# fuzz runs every target for FUZZTIME (make fuzz FUZZTIME=30m).
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "== $${t#*:} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) ./$${t%%:*}/ || exit 1; \
	done

# fuzz-short is the run CI does after the tests: each target for a count of
# inputs, about what it runs in 10 s on a two-core machine, rather than for
# a time. A run bounded by time can fail with a bare "context deadline
# exceeded" when its time is up while a worker is still busy, a race in Go's
# fuzzing coordinator (go.dev/issue/75804, fixed in Go 1.27) that reports no
# input; a count has no deadline to race.
FUZZ_SHORT := alarmindex:FuzzParseKey:30000 cluster:FuzzHoldRecord:40000 cluster:FuzzLeaseRecord:40000 \
	cluster:FuzzSnapshotKey:60000 node:FuzzHTTPHandler:10000 node:FuzzRestoredSnapshot:1000 \
	engine:FuzzHostFunctions:6000 hostmod:FuzzAlarmFunctionsOnATable:3000 hostmod:FuzzAlarmFunctionsOutOfTurn:1000
fuzz-short:
	@for t in $(FUZZ_SHORT); do \
		pkg=$${t%%:*}; rest=$${t#*:}; target=$${rest%%:*}; n=$${rest#*:}; \
		echo "== $$target ($${n}x)"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $${n}x ./$$pkg/ || exit 1; \
	done

SEEDS ?= 2000
# sim runs the deterministic simulation over SEEDS seeds (make sim SEEDS=20000).
sim:
	$(GO) test -count=1 -timeout 0 -run 'TestSim$$' -v ./sim -sim.seeds=$(SEEDS)

# testdata rebuilds the .wasm fixtures from their .wat sources (needs wabt's wat2wasm).
testdata:
	@command -v wat2wasm >/dev/null || { echo "make testdata: wat2wasm not found; install wabt (Debian: apt-get install wabt)" >&2; exit 1; }
	for f in testdata/wasm/*.wat; do wat2wasm "$$f" -o "$${f%.wat}.wasm"; done
	wat2wasm examples/soak-actor/soak_actor.wat -o examples/soak-actor/soak_actor.wasm
	wat2wasm hostmod/testdata/recipe.wat -o hostmod/testdata/recipe.wasm
	wat2wasm cmd/noisy/noisy.wat -o cmd/noisy/noisy.wasm

# bench prints the benchmarks docs/benchmarks.md quotes (bench-failover: the
# failover runs, several minutes at the spec's defaults).
bench: tools
	$(GO) test -run '^$$' -bench . -benchtime 1x ./sweeper/
	$(GO) test -run '^$$' -bench 'SetAlarmVsUpsert|Delivery' -benchtime 2s ./engine/
	$(GO) test -run '^$$' -bench IdleLateness -benchtime 5x ./node/
	$(GO) test -run '^$$' -bench ClusterCounter -benchtime 3s ./node/
	$(GO) test -run '^$$' -bench SweepNoneOverdue -benchtime 200x .
	$(GO) test -run '^$$' -bench CounterGuests -benchtime 1000x -timeout 30m ./engine/
	$(MAKE) bench-firings

# bench-firings: replicated alarm firings on one node (1, 8, 64 and 200
# always-due actors on versitygw, its files on disk, then on a tmpfs):
# firings/s, node CPU and requests per firing; how much more CPU this machine
# charges for work that follows an idle spell; then the S3 client's CPU per
# PUT (an index entry, a 32 KiB snapshot), and a firing's work on the actor's
# database alone (commit, record, snapshot).
bench-firings: tools
	$(GO) test -run '^$$' -bench 'ReplicatedFirings|WorkAfterIdle' -benchtime 2000x -timeout 60m ./node/
	$(GO) test -run '^$$' -bench S3Put -benchtime 2000x ./bucket/s3/
	$(GO) test -run '^$$' -bench ReplicatedFiringStore -benchtime 20000x ./engine/

bench-failover: tools
	$(GO) test -run '^$$' -bench Failover -benchtime 1x -timeout 30m ./node/

# bench-sleep: residency. 100,000 sleeping actors of a .wat guest on one node
# under ulimit -n 4096 (create, RSS, fds, the scan after a restart); cold and
# warm firings/s; 10,000 Go counter actors (peak RSS). Tens of minutes.
bench-sleep:
	ulimit -n 4096 && $(GO) test -run '^$$' -bench SleepingActors -benchtime 1x -timeout 0 ./node/
	$(GO) test -run '^$$' -bench Firings -benchtime 1x -timeout 0 ./node/
	$(GO) test -run '^$$' -bench SleepingCounters -benchtime 1x -timeout 0 ./node/

# bench-million: the start-up scan and RSS with 1,000,000 pending alarms.
bench-million:
	$(GO) test -run '^$$' -bench MillionPending -benchtime 1x -timeout 0 ./node/

# mutate: every entry of the mutation list (internal/mutate/mutations.txt):
# each breaks one line that carries a safety rule, in a scratch copy of the
# tracked files, and its named test or simulator seed must fail
# (docs/development.md#mutation-testing). mutate-short: MUTATE_SHORT entries,
# a different run of them each day (MUTATE_SEED=N picks the run of day N).
.PHONY: mutate mutate-short
MUTATE_SHORT ?= 8
mutate: tools
	$(GO) run ./internal/mutate

mutate-short: tools
	$(GO) run ./internal/mutate -short $(MUTATE_SHORT)

# promtool: the promtool of the Prometheus release deploy/compose.yaml runs
# (deploy/prometheus/promtool, a module of its own), built into
# build/promtool, where the dashboard's test finds it too: a few minutes the
# first time on two cores, seconds from Go's build cache after that.
promtool:
	cd deploy/prometheus/promtool && $(GO) mod tidy -diff && $(GO) build -o $(CURDIR)/build/promtool github.com/prometheus/prometheus/cmd/promtool

# k8s-check: the Kubernetes set of deploy/k8s (no cluster runs it here):
# rendered as kubectl apply -k renders it, with and without its tls
# component, every object decoded strictly into its Kubernetes API type,
# and held to keepnode's flags (keepnode -help), its probes' routes, its
# image and the Secrets docs/deploy.md creates. deploy/k8s/check is a
# module of its own, so the main module does not depend on Kustomize.
k8s-check:
	cd deploy/k8s/check && $(GO) vet ./... && $(GO) mod tidy -diff && $(GO) test -count=1 ./...

# deploy-check: the files of deploy/ that the tests do not run. The alert
# rules (promtool check rules) and their unit tests (promtool test rules),
# and the Prometheus configuration of the compose file; the systemd unit
# (systemd-analyze verify, where any warning fails it, and systemd-analyze
# security: an exposure of at most 2.0), skipped with a note where
# systemd-analyze is missing. promtool is the one of the Prometheus release
# deploy/compose.yaml runs (make promtool). The image's binaries, the example
# configuration and the dashboard's queries are tested by make test
# (cmd/keepnode); the Kubernetes set by k8s-check, which it runs first.
.PHONY: deploy-check k8s-check promtool
deploy-check: k8s-check promtool
	build/promtool check rules deploy/prometheus/alerts.yml
	cd deploy/prometheus && ../../build/promtool test rules alerts_test.yml
	build/promtool check config deploy/prometheus/prometheus.yml
	@if ! command -v systemd-analyze >/dev/null; then \
		echo "make deploy-check: systemd-analyze not found; deploy/keepnode.service not checked"; exit 0; \
	fi; \
	d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(GO) build -o "$$d/keepnode" ./cmd/keepnode || exit 1; \
	sed "s|/usr/local/bin/keepnode|$$d/keepnode|" deploy/keepnode.service > "$$d/keepnode.service"; \
	out=$$(systemd-analyze verify "$$d/keepnode.service" 2>&1); rc=$$?; \
	if [ $$rc -ne 0 ] || [ -n "$$out" ]; then echo "$$out"; echo "make deploy-check: systemd-analyze verify deploy/keepnode.service: not clean" >&2; exit 1; fi; \
	systemd-analyze security --offline=yes --threshold=20 "$$d/keepnode.service" >/dev/null || \
		{ systemd-analyze security --offline=yes "$$d/keepnode.service"; echo "make deploy-check: deploy/keepnode.service is exposed above 2.0" >&2; exit 1; }; \
	echo "deploy/keepnode.service: systemd-analyze verify and security (exposure at most 2.0): ok"
