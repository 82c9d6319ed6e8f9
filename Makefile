# cellvm — see README.md. `make setup` once on a fresh Debian 12 machine,
# then `make test`.

GO      ?= go
# VERSION is what cellvm --version and GET /v1/version say: the nearest
# tag (git describe), else empty, and then the module's build info's.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null)
# No cgo anywhere: the VMM's jail drops privileges on every thread with Go's
# own all-threads system calls (cgo forbids them), and the binaries are
# static. (A -race run needs cgo; the jail's own test then skips, saying so.)
export CGO_ENABLED := 0
BUILD   := build
BIN     := $(BUILD)/bin
RIG     := test/nested/run.sh
# One L1's run of the core tier: about 36 minutes since images are built in
# builder VMs (issue 24); RIG_BUDGET (test-rig.sh, 3300 s) bounds all attempts.
RIG_TIMEOUT ?= 2700
RIG_MEM ?= 4096

.PHONY: all setup deps kernel typescript image cellvm initramfs e2b-sdk test test-unit test-rig test-rig-full bench fuzz vet clean

all: cellvm initramfs

## setup: install Debian packages, build the guest kernel, the guest image and cellvm
setup: deps kernel typescript image cellvm initramfs e2b-sdk

## e2b-sdk: E2B's JS SDKs at the versions test/e2b/package-lock.json pins
## (api/e2b's TestSDK and the rig's TestE2BSDK run them; skipped without)
e2b-sdk:
	@if command -v npm >/dev/null; then cd test/e2b && npm ci --no-audit --no-fund; \
	else echo "npm not found: the E2B SDK tests will be skipped"; fi

deps:
	scripts/install-deps.sh

kernel:
	kernel/build.sh

## typescript: TypeScript's transpiler, pinned in image/typescript.sh, in
## build/typescript/ (the image carries it; the Node runtime's tests load it)
typescript:
	image/typescript.sh

image: typescript
	image/build.sh

## cellvm: build/bin/cellvm and build/bin/cellvm-vmm, the small binary the
## daemon starts for each VM; cellvm carries its SHA-256 and runs only that
## one (else `cellvm vmm`). Keep the two side by side.
cellvm:
	@mkdir -p $(BIN)
	$(GO) build -buildvcs=auto -o $(BIN)/cellvm-vmm ./cmd/cellvm-vmm
	$(GO) build -buildvcs=auto -ldflags "-X main.buildCommit=$$(git rev-parse HEAD 2>/dev/null) -X main.buildRelease=$(VERSION) -X main.vmmSHA256=$$(sha256sum $(BIN)/cellvm-vmm | cut -d' ' -f1)" -o $(BIN)/cellvm ./cmd/cellvm

## initramfs: the static guest init as /init of build/initramfs.cpio
initramfs:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/cellvm-init ./cmd/cellvm-init
	$(GO) run ./image/mkinitramfs -init $(BIN)/cellvm-init -o $(BUILD)/initramfs.cpio

## test: the host's tests (the KVM tests among them run natively where this
## host's KVM can run cellvm guests), then, where it cannot, the KVM tests in
## the nested rig. `cellvm doctor --kvm` decides, by a probe guest.
test: cellvm
	@$(MAKE) --no-print-directory test-unit
	@echo "make test: does this host's KVM run cellvm guests? (cellvm doctor --kvm)"
	@if $(BIN)/cellvm doctor --kvm; then \
	  echo "make test: KVM path: native. The KVM tests ran on this host in test-unit above; the nested rig is skipped ('make test-rig' forces it)."; \
	else \
	  echo "make test: KVM path: nested rig (this host's KVM cannot run cellvm guests, as said above; the KVM tests skipped on the host)."; \
	  $(MAKE) --no-print-directory test-rig; \
	fi

# The host guard records the host's network namespace (links, addresses,
# routes, iptables, sysctls) before the tests and fails the run if they
# changed it: tests build their networks in namespaces of their own.
test-unit: vet
	@mkdir -p $(BUILD)
	$(GO) run ./test/hostguard save $(BUILD)/hostguard.json
	@rc=0; $(GO) test -timeout 30m ./... || rc=$$?; \
	$(GO) run ./test/hostguard check $(BUILD)/hostguard.json || rc=1; exit $$rc

vet:
	$(GO) vet ./...

# A wedged, crashed or timed-out L1 is the emulator's failure, not a test's:
# test-rig.sh then boots a fresh L1 that runs only the tests not yet passed,
# within one budget for all attempts (RIG_BUDGET), and says so.
# test-rig runs the core tier; test-rig-full adds the extended tier
# (test/nested/extended-tests.txt: real-VM client programs, the load test),
# with a budget to match. Both build the guest's initramfs first: the rig's
# guests boot it, and one left over from before a change to the guest's
# init would test the old one.
test-rig: cellvm initramfs
	RIG_SUITE=core test/nested/build-kvm-tests.sh
	RIG_MEM=$(RIG_MEM) RIG_TIMEOUT=$(RIG_TIMEOUT) test/nested/test-rig.sh

test-rig-full: cellvm initramfs
	RIG_SUITE=full test/nested/build-kvm-tests.sh
	RIG_MEM=$(RIG_MEM) RIG_TIMEOUT=3600 RIG_BUDGET=$${RIG_BUDGET:-5400} test/nested/test-rig.sh

## bench: cellvm vs QEMU microvm in the same rig run (ratios, not promises);
## BENCH_ARGS="-only snapshots" runs some of the benches (test/bench -only)
bench: cellvm
	@mkdir -p $(BUILD)/bench
	CGO_ENABLED=0 $(GO) build -o $(BUILD)/bench/cellvm-bench ./test/bench
	test/nested/rig-fixtures.sh  # the images bench's python:slim-like image (cached)
	$(RIG) --mem $(RIG_MEM) --timeout $(RIG_TIMEOUT) -- $(BUILD)/bench/cellvm-bench -cellvm $(BIN)/cellvm -build $(BUILD) $(BENCH_ARGS)

## fuzz: run every fuzz target for FUZZTIME (default 60s) each
FUZZTIME ?= 60s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -parallel 1 $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf $(BUILD)
