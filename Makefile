# tend's build. `make test` is what CI runs (.ci/run) and what the README shows.
GO      ?= go
BIN     := bin/tend
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test vet unit e2e-sh install clean chaos bench bench-peers fuzz hardening

all: build

# tend, and tend-mcp beside it: the MCP server that `tend mcp` runs, a
# program of its own so that no other tend call pays the MCP SDK's start-up.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/tend ./cmd/tend-mcp

# vet, then unit and end-to-end (testscript) tests under the race detector,
# then the POSIX sh client suite under dash and bash.
test: vet unit e2e-sh

vet:
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

e2e-sh: build
	dash scripts/e2e.sh $(BIN)
	bash scripts/e2e.sh $(BIN)

install:
	$(GO) install -ldflags "$(LDFLAGS)" ./cmd/tend ./cmd/tend-mcp

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
	$(GO) test -run '^$$' -fuzz '^FuzzParseControl$$' -fuzztime $(FUZZTIME) ./spool
	$(GO) test -run '^$$' -fuzz '^FuzzParseState$$' -fuzztime $(FUZZTIME) ./tracker
	$(GO) test -run '^$$' -fuzz '^FuzzParseBrief$$' -fuzztime $(FUZZTIME) ./tracker
	$(GO) test -run '^$$' -fuzz '^FuzzReadHistory$$' -fuzztime $(FUZZTIME) ./tracker

# The slow and privileged end-to-end tests (cmd/tend/testdata/hardening):
# a full disk (a tmpfs, mounted as root), exhausted file descriptors and
# inotify limits, a read-only root, an unreadable request, a clock set back,
# 10,000 requests at once. CI runs them after make test.
hardening:
	TEND_HARDENING=1 $(GO) test -count=1 -timeout 30m -run '^(TestHardening|TestClockJump)$$' ./cmd/tend
