package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"golang.org/x/sys/unix"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 20; i >= 1; i-- { // unsorted: 20 s down to 1 s
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 10 * time.Second}, {99, 20 * time.Second}, {100, 20 * time.Second}, {95, 19 * time.Second}, {1, time.Second}, {0, time.Second}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("p%v of 1..20 s = %v, want %v", c.p, got, c.want)
		}
	}
	if ds[0] != 20*time.Second {
		t.Errorf("percentile sorted its argument: %v", ds)
	}
	if got := percentile([]time.Duration(nil), 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
	one := []time.Duration{3 * time.Millisecond}
	if percentile(one, 50) != one[0] || percentile(one, 99) != one[0] {
		t.Errorf("a single sample is every percentile")
	}
}

func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		v, goal float64
		unit    string
		want    string
	}{
		{0.02, 0.02, "", "goal <= 0.02: met"},
		{0.031, 0.02, "", "goal <= 0.02: MISSED, 1.55x the goal"},
		{12, 8, " MiB", "goal <= 8 MiB: MISSED, 1.50x the goal"},
		{1, 0, "", "goal <= 0: MISSED"},
	} {
		if got := verdict(c.v, c.goal, c.unit); got != c.want {
			t.Errorf("verdict(%v, %v) = %q, want %q", c.v, c.goal, got, c.want)
		}
	}
	if ratio(time.Second, 0) != 0 || ratio(time.Second, 4*time.Second) != 0.25 {
		t.Errorf("ratio")
	}
}

const rollupFixture = `55d0c0a00000-7ffd2b5fe000 ---p 00000000 00:00 0                          [rollup]
Rss:              160100 kB
Pss:              158000 kB
Pss_Anon:          10000 kB
`

func TestRollupField(t *testing.T) {
	if got, err := rollupField([]byte(rollupFixture), "Rss"); err != nil || got != 160100<<10 {
		t.Errorf("Rss = %d, %v", got, err)
	}
	if got, err := rollupField([]byte(rollupFixture), "Pss"); err != nil || got != 158000<<10 {
		t.Errorf("Pss = %d, %v (Pss_Anon must not match)", got, err)
	}
	if _, err := rollupField([]byte("Rss: lots\n"), "Rss"); err == nil {
		t.Errorf("a malformed Rss line was read")
	}
}

// smapsFixture is a restored VMM's: the Go heap (no nr), a reserve that
// is nr but not writable (as glibc's malloc arenas are), the memory file
// mapped privately with a layer's extent mapped over its middle (three
// mappings, all nr), and a mapping whose path has spaces.
const smapsFixture = `c000000000-c004000000 rw-p 00000000 00:00 0 
Size:              65536 kB
Rss:                4000 kB
Pss:                4000 kB
VmFlags: rd wr mr mw me ac sd 
7e0000000000-7e0004000000 ---p 00000000 00:00 0 
Size:              65536 kB
Rss:                   0 kB
VmFlags: mr mw me nr sd 
7f0000000000-7f0008000000 rw-p 00000000 00:2a 12                         /state/sb/memory
Size:             131072 kB
Rss:               20000 kB
Pss:                5000 kB
VmFlags: rd wr mr mw me ac nr sd 
7f0008000000-7f0008100000 rw-p 00000000 00:2a 13                         /state/sb/layer-1 (deleted)
Size:               1024 kB
Rss:                1024 kB
VmFlags: rd wr mr mw me ac nr sd 
7f0008100000-7f0020000000 rw-p 08100000 00:2a 12                         /state/sb/memory
Size:             392192 kB
Rss:              100000 kB
VmFlags: rd wr mr mw me ac nr sd 
7f0020000000-7f0020001000 rw-s 00000000 00:0e 9                          anon_inode:kvm-vcpu:0
Size:                  4 kB
Rss:                   4 kB
VmFlags: rd wr sh mr mw me ms sd 
`

func TestGuestMemoryFixture(t *testing.T) {
	size, rss, err := guestMemory([]byte(smapsFixture))
	if err != nil {
		t.Fatal(err)
	}
	if size != 512<<20 {
		t.Errorf("guest size %d MiB, want 512", size>>20)
	}
	if want := int64(20000+1024+100000) << 10; rss != want {
		t.Errorf("guest RSS %d kB, want %d kB", rss>>10, want>>10)
	}
	noGuest := strings.Join(strings.Split(smapsFixture, "\n")[:9], "\n")
	if _, _, err := guestMemory([]byte(noGuest)); err == nil {
		t.Errorf("a VMM without an nr mapping has guest memory")
	}
}

// TestGuestMemorySelf checks the premise on this process, a Go program
// like the VMM: a mapping made with MAP_NORESERVE is found with its
// resident pages, and nothing else of the process's grows with it. Built
// without cgo, as the VMM and make's tests are, the runtime has no nr
// mapping at all; with cgo, glibc's malloc arena has a small one.
func TestGuestMemorySelf(t *testing.T) {
	smaps := func() []byte {
		b, err := os.ReadFile("/proc/self/smaps")
		if err != nil {
			t.Skip(err)
		}
		return b
	}
	before, beforeRSS, err := guestMemory(smaps())
	if err == nil {
		t.Logf("writable nr mappings before the test's: %d bytes, %d resident (glibc's, with cgo)", before, beforeRSS)
	}
	const size, touched = 64 << 20, 3 << 20
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for i := 0; i < touched; i += 4096 {
		mem[i] = 1
	}
	got, rss, err := guestMemory(smaps())
	if err != nil {
		t.Fatal(err)
	}
	if got-before != size {
		t.Errorf("nr mappings grew by %d bytes, want %d", got-before, size)
	}
	if d := rss - beforeRSS; d < touched || d > touched+(1<<20) {
		t.Errorf("nr resident bytes grew by %d, want about %d", d, touched)
	}
}

func TestOverheadParts(t *testing.T) {
	fixture := smapsFixture + `00400000-01400000 r-xp 00000000 00:2a 99                         /usr/local/bin/cellvm
Size:              16384 kB
Rss:                6000 kB
VmFlags: rd ex mr mw me sd 
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  12 kB
VmFlags: rd wr mr mw me gd ac 
`
	parts, err := overheadParts([]byte(fixture))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"anon": 4000 << 10, "file": 6000 << 10, "stack": 12 << 10, "kvm": 4 << 10}
	for k, v := range want {
		if parts[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, parts[k], v, parts)
		}
	}
	var sum int64
	for _, v := range parts {
		sum += v
	}
	if sum != 4000<<10+6000<<10+12<<10+4<<10 {
		t.Errorf("the parts sum to %d: the guest's mappings were counted (%v)", sum, parts)
	}
}

func TestStartBreakdownFields(t *testing.T) {
	ms := map[string]int64{}
	parseSteps("prepare=12 spawn=3 agent=900 renew=40", ms)
	parseSteps(`time=2026-12-03T15:07:06.431Z level=INFO msg="vmm built" since_exec_ms=628 jail_enter_ms=35 build_ms=1229`, ms)
	parseSteps(setupField.FindStringSubmatch(`level=INFO msg="vm starting" vcpus=1 memory_mib=512 setup="kvm=1.2ms memory=0.1ms kernel=496.7ms devices=3.0ms boot=0.4ms vcpus=12.9ms" kernel=/kernel`)[1], ms)
	want := map[string]int64{"prepare": 12, "spawn": 3, "agent": 900, "renew": 40, "since_exec": 628, "jail_enter": 35, "build": 1229,
		"kvm": 1, "memory": 0, "kernel": 496, "devices": 3, "vcpus": 12}
	for k, v := range want {
		if ms[k] != v {
			t.Errorf("%s = %d, want %d (all %v)", k, ms[k], v, ms)
		}
	}
	if got := formatBreakdown(medianBreakdown([]map[string]int64{{"spawn": 1, "cell": 5}, {"spawn": 3, "cell": 7}, {"spawn": 2, "cell": 6}})); got != "spawn 2, cell 6" {
		t.Errorf("median breakdown %q", got)
	}
}

func TestPairedRatio(t *testing.T) {
	s := time.Second
	// The rounds' own ratios are 1.1, 1.2 and 1.0, on a rig whose speed
	// moved between rounds.
	on := []time.Duration{11 * s / 10, 4 * s, 3 * s}
	off := []time.Duration{1 * s, 4 * s * 10 / 12, 3 * s}
	if got := pairedRatio(on, off); got < 1.099 || got > 1.101 {
		t.Errorf("pairedRatio = %v, want 1.1 (the median of 1.1, 1.2, 1.0)", got)
	}
	if got := pairedRatio(on[:2], off[:2]); got < 1.149 || got > 1.151 {
		t.Errorf("pairedRatio of two = %v, want 1.15", got)
	}
	if got := pairedRatio(nil, nil); got != 0 {
		t.Errorf("pairedRatio of none = %v, want 0", got)
	}
}

// TestBurstOutcome: the bursts bench counts a create with no error as
// created, a 503 (the daemon's queue full, answered at once) as refused,
// and anything else, a boot past its deadline among them, as failed.
func TestBurstOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "created"},
		{&api.Error{Status: http.StatusServiceUnavailable, Code: "full", Message: "boot queue full"}, "refused"},
		{fmt.Errorf("create: %w", &api.Error{Status: http.StatusServiceUnavailable, Code: "full"}), "refused"},
		{&api.Error{Status: http.StatusInternalServerError, Code: "internal", Message: "guest agent did not answer within 1m0s"}, "failed"},
		{errors.New("dial unix: connection refused"), "failed"},
	} {
		if got := burstOutcome(c.err); got != c.want {
			t.Errorf("burstOutcome(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
