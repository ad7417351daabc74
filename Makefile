# tend's build. `make test` is what CI runs (.ci/run) and what the README shows.
GO      ?= go
BIN     := bin/tend
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test vet unit e2e-sh install clean chaos powerloss powerloss-mutants bench bench-peers fuzz hardening

all: build

# tend, and beside it tend-watch, the watcher that `tend watch` and `tend
# up` run, tend-mcp, the MCP server that `tend mcp` runs, and tend-top, the
# live view that `tend top` runs: programs of their own so that no other
# tend call pays the start-up of the watcher, the MCP SDK or a terminal UI
# library. tend itself is built without cgo, a static binary that starts
# in about two thirds of the time (docs/performance.md, round 18): only
# the watcher needs the system's name services.
build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/tend
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/tend-watch ./cmd/tend-mcp ./cmd/tend-top

# vet, then unit and end-to-end (testscript) tests under the race detector,
# then the POSIX sh client suite under dash and bash.
test: vet unit e2e-sh

vet:
	$(GO) vet ./...

# Four end-to-end scripts at once, not GOMAXPROCS's two: most of their
# time is spent waiting on processes, timers and the disk (the power-loss
# trial's 20 cuts take minutes of waiting and seconds of CPU), so two
# left the cores idle and CI's time twice what it needs.
unit:
	$(GO) test -race -count=1 -timeout 20m -parallel 4 ./...

e2e-sh: build
	dash scripts/e2e.sh $(BIN)
	bash scripts/e2e.sh $(BIN)

install:
	CGO_ENABLED=0 $(GO) install -ldflags "$(LDFLAGS)" ./cmd/tend
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/tend-watch ./cmd/tend-mcp ./cmd/tend-top

clean:
	rm -rf bin

# Hundreds of rounds of the crash test in each mode: SIGKILL the watcher,
# the keeper, or the watcher and then, once recovered from, the keeper, at
# random moments; every run must still end exactly once with its true exit
# code. Then both together, in one recovery window: exit codes may be lost
# there (the test reports how many), never wrong. TEND_CHAOS_SEED=N replays
# a failing sequence (the test prints its seed).
CHAOS_ROUNDS ?= 300
chaos:
	TEND_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(GO) test -count=1 -timeout 120m -run 'TestScripts/^chaos(_keeper)?$$' -v ./cmd/tend

# The power-loss trial (#20): the root on a crashfs mount, which forgets
# at each cut what was not fsynced; CUTS cuts (make test runs 20), at
# random moments and around each flush of a scripted sequence, each
# followed by a recovery and the checks. Needs root and FUSE. Ends with
# "powerloss: N cuts, M checks, V violations (T torn first records
# recovered, E ends and stops brought back from the history)"; exit 1 if
# V is not 0.
# TEND_POWERLOSS_SEED=N replays a trial (the first line prints its seed).
CUTS ?= 200
powerloss:
	@mkdir -p bin; rm -f bin/powerloss.txt
	@TEND_POWERLOSS_CUTS=$(CUTS) TEND_POWERLOSS_PROGRESS=1 TEND_POWERLOSS_REPORT=$(CURDIR)/bin/powerloss.txt \
		$(GO) test -v -count=1 -timeout 180m -run 'TestScripts/^powerloss$$' ./cmd/tend; \
		status=$$?; cat bin/powerloss.txt 2>/dev/null || echo "powerloss: no report (see above)"; exit $$status

# The same trial once for each flush tend makes, with that flush left out
# (a build with the tendmutants tag): each must be caught. MUTANT_CUTS
# bounds each trial (it stops at its first violation). Ends with
# "flushes: K, caught: C"; exit 1 if C is not K. The mutant of claim
# (a cut must find a queued run's request not yet synced in the
# spool), was caught at cuts 39, 59 and 82 in three trials and missed in
# 100 cuts in a fourth (2026-11-28): 250 leaves it room.
MUTANT_CUTS ?= 250
powerloss-mutants:
	@mkdir -p bin; rm -f bin/powerloss-mutants.txt
	@TEND_MUTANT_CUTS=$(MUTANT_CUTS) TEND_POWERLOSS_PROGRESS=1 TEND_POWERLOSS_REPORT=$(CURDIR)/bin/powerloss-mutants.txt \
		$(GO) test -v -tags tendmutants -count=1 -timeout 300m -run '^TestPowerLossMutants$$' ./cmd/tend; \
		status=$$?; cat bin/powerloss-mutants.txt 2>/dev/null || echo "flushes: no report (see above)"; exit $$status

# Benchmarks (issue #8's W1-W5) print tend's figures beside the machine's
# own floor measured in the same run, with the ratio and target of each;
# they exit 1 if a target is missed. Never part of make test.
bench: build
	$(GO) run ./scripts/bench $(BIN)

# The same table, with task-spooler and nq measured in the same run
# (installed with apt-get if missing).
bench-peers: build
	$(GO) run ./scripts/bench -peers $(BIN)

# Fuzz the parsers of everything anyone can write into a root, for a while
# each (FUZZTIME). make test replays their corpora in testdata/fuzz.
FUZZTIME ?= 1m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseName$$' -fuzztime $(FUZZTIME) ./spool
	$(GO) test -run '^$$' -fuzz '^FuzzParseStart$$' -fuzztime $(FUZZTIME) ./spool
	$(GO) test -run '^$$' -fuzz '^FuzzFastJSONIsV1s$$' -fuzztime $(FUZZTIME) ./spool
	$(GO) test -run '^$$' -fuzz '^FuzzParseControl$$' -fuzztime $(FUZZTIME) ./spool
	$(GO) test -run '^$$' -fuzz '^FuzzParseState$$' -fuzztime $(FUZZTIME) ./tracker
	$(GO) test -run '^$$' -fuzz '^FuzzParseBrief$$' -fuzztime $(FUZZTIME) ./tracker
	$(GO) test -run '^$$' -fuzz '^FuzzPrintable$$' -fuzztime $(FUZZTIME) ./cmd/internal/runtext
	$(GO) test -run '^$$' -fuzz '^FuzzReadHistory$$' -fuzztime $(FUZZTIME) ./tracker

# The slow and privileged end-to-end tests (cmd/tend/testdata/hardening):
# a full disk (a tmpfs, mounted as root), exhausted file descriptors and
# inotify limits, a read-only root, an unreadable request, a clock set back,
# 10,000 requests at once. CI runs them after make test.
hardening:
	TEND_HARDENING=1 $(GO) test -count=1 -timeout 30m -run '^(TestHardening|TestClockJump)$$' ./cmd/tend
