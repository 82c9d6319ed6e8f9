package api

// Tests of the sandbox package's contract helpers (Config JSON and
// validation, GuestPath), kept here because this package owns that file's
// tests while the sandbox package's other files belong to the manager.

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

func TestGuestPath(t *testing.T) {
	good := map[string]string{
		"workspace/data.csv":  "/workspace/data.csv",
		"/workspace/data.csv": "/workspace/data.csv",
		"tmp//x/":             "/tmp/x",
		"workspace/./a":       "/workspace/a",
		"procfile":            "/procfile",
		"workspace/proc":      "/workspace/proc",
		"devices/x":           "/devices/x",
		"a/..b/c..":           "/a/..b/c..",
	}
	for in, want := range good {
		got, err := sandbox.GuestPath(in)
		if err != nil || got != want {
			t.Errorf("GuestPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		"", "/", "//", ".", "..", "../etc", "workspace/../../etc/passwd", "workspace/..",
		"a\x00b", "proc", "proc/self/mem", "/sys/x", "dev", "dev/kvm", "/dev/../etc",
		"workspace/" + strings.Repeat("a", sandbox.MaxGuestPathLen),
	}
	for _, in := range bad {
		if got, err := sandbox.GuestPath(in); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("GuestPath(%q) = %q, %v; want ErrInvalid", clipString(in, 40), got, err)
		}
	}
}

func TestConfigJSON(t *testing.T) {
	cfg := sandbox.Config{VCPUs: 2, MemoryMiB: 256, Env: map[string]string{"A": "1"}, TTL: 90 * time.Second,
		IdleTimeout: 5 * time.Second, Network: &sandbox.NetworkPolicy{Allow: []string{"example.com"}}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"vcpus":2,"memory_mib":256,"env":{"A":"1"},"ttl_s":90,"idle_timeout_s":5,"network":{"allow":["example.com"]}}`
	if string(b) != want {
		t.Errorf("JSON %s\nwant %s", b, want)
	}
	var back sandbox.Config
	if err := json.Unmarshal(b, &back); err != nil || back.TTL != cfg.TTL || back.IdleTimeout != cfg.IdleTimeout || back.Network.Allow[0] != "example.com" {
		t.Errorf("round trip %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"vcpus":1,"swap":true}`), &back); err == nil {
		t.Error("unknown field accepted")
	}
	// A TTL beyond int64 nanoseconds must not wrap into a valid value.
	if err := json.Unmarshal([]byte(`{"ttl_s": 9223372036854775807}`), &back); err != nil {
		t.Fatal(err)
	}
	if err := back.WithDefaults().Validate(); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("huge ttl_s validated: %v (TTL %v)", err, back.TTL)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := sandbox.Config{}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	mut := func(f func(*sandbox.Config)) sandbox.Config { c := ok; f(&c); return c }
	bigEnv := map[string]string{}
	for i := 0; i < sandbox.MaxEnvVars+1; i++ {
		bigEnv["V"+strings.Repeat("x", i%5)+string(rune('A'+i%26))+strings.Repeat("_", i/26)] = ""
	}
	bad := map[string]sandbox.Config{
		"vcpus 0":       mut(func(c *sandbox.Config) { c.VCPUs = 0 }),
		"vcpus 33":      mut(func(c *sandbox.Config) { c.VCPUs = 33 }),
		"memory 63":     mut(func(c *sandbox.Config) { c.MemoryMiB = 63 }),
		"memory 65537":  mut(func(c *sandbox.Config) { c.MemoryMiB = 65537 }),
		"env key digit": mut(func(c *sandbox.Config) { c.Env = map[string]string{"9A": ""} }),
		"env key empty": mut(func(c *sandbox.Config) { c.Env = map[string]string{"": ""} }),
		"env key dash":  mut(func(c *sandbox.Config) { c.Env = map[string]string{"A-B": ""} }),
		"env value NUL": mut(func(c *sandbox.Config) { c.Env = map[string]string{"A": "x\x00"} }),
		"env value big": mut(func(c *sandbox.Config) {
			c.Env = map[string]string{"A": strings.Repeat("x", sandbox.MaxEnvValueBytes+1)}
		}),
		"env too many":    mut(func(c *sandbox.Config) { c.Env = bigEnv }),
		"ttl negative":    mut(func(c *sandbox.Config) { c.TTL = -time.Second }),
		"idle negative":   mut(func(c *sandbox.Config) { c.IdleTimeout = -time.Second }),
		"allow empty":     mut(func(c *sandbox.Config) { c.Network = &sandbox.NetworkPolicy{Allow: []string{""}} }),
		"allow bad label": mut(func(c *sandbox.Config) { c.Network = &sandbox.NetworkPolicy{Allow: []string{"-a.com"}} }),
		"allow space":     mut(func(c *sandbox.Config) { c.Network = &sandbox.NetworkPolicy{Allow: []string{"a .com"}} }),
	}
	if len(bigEnv) <= sandbox.MaxEnvVars {
		t.Fatalf("test setup: bigEnv has %d keys", len(bigEnv))
	}
	for name, c := range bad {
		if err := c.Validate(); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	good := mut(func(c *sandbox.Config) {
		c.VCPUs, c.MemoryMiB = 32, 65536
		c.Env = map[string]string{"_a9": "v", "PATH": "/bin"}
		c.Network = &sandbox.NetworkPolicy{Allow: []string{"1.2.3.4", "198.51.100.0/24:443", "10.0.0.0/8", "*.github.com", "pypi.org."}}
	})
	if err := good.Validate(); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
