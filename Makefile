# cellvm — see README.md. `make setup` once on a fresh Debian 12 machine,
# then `make test`.

GO      ?= go
BUILD   := build
BIN     := $(BUILD)/bin
RIG     := test/nested/run.sh
RIG_TIMEOUT ?= 1800
RIG_MEM ?= 4096

.PHONY: all setup deps kernel image cellvm initramfs test test-unit test-rig bench fuzz vet clean

all: cellvm initramfs

## setup: install Debian packages, build the guest kernel, the guest image and cellvm
setup: deps kernel image cellvm initramfs

deps:
	scripts/install-deps.sh

kernel:
	kernel/build.sh

image:
	image/build.sh

cellvm:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/cellvm ./cmd/cellvm

## initramfs: the static guest init as /init of build/initramfs.cpio
initramfs:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/cellvm-init ./cmd/cellvm-init
	$(GO) run ./image/mkinitramfs -init $(BIN)/cellvm-init -o $(BUILD)/initramfs.cpio

## test: unit tests on the host, then the KVM tests inside the nested rig
test: test-unit test-rig

test-unit: vet
	$(GO) test ./...

vet:
	$(GO) vet ./...

# A wedged, crashed or timed-out L1 is the emulator's failure, not a test's:
# test-rig.sh then boots a fresh L1 that runs only the tests not yet passed,
# within one budget for all attempts (RIG_BUDGET), and says so.
test-rig: cellvm
	test/nested/build-kvm-tests.sh
	RIG_MEM=$(RIG_MEM) RIG_TIMEOUT=$(RIG_TIMEOUT) test/nested/test-rig.sh

## bench: cellvm vs QEMU microvm in the same rig run (ratios, not promises)
bench: cellvm
	@mkdir -p $(BUILD)/bench
	CGO_ENABLED=0 $(GO) build -o $(BUILD)/bench/cellvm-bench ./test/bench
	$(RIG) --timeout $(RIG_TIMEOUT) -- $(BUILD)/bench/cellvm-bench -cellvm $(BIN)/cellvm -build $(BUILD)

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
