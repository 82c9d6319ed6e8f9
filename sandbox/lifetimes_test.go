package sandbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLifetimesOnTheWire: ttl_s and idle_timeout_s absent are the
// default (0), 0 is Never, n is n seconds; and writing gives them back.
func TestLifetimesOnTheWire(t *testing.T) {
	for _, c := range []struct {
		wire      string
		ttl, idle time.Duration
	}{
		{`{}`, 0, 0},
		{`{"ttl_s": null, "idle_timeout_s": null}`, 0, 0},
		{`{"ttl_s": 0}`, Never, 0},
		{`{"idle_timeout_s": 0}`, 0, Never},
		{`{"ttl_s": 0, "idle_timeout_s": 0}`, Never, Never},
		{`{"ttl_s": 90, "idle_timeout_s": 5}`, 90 * time.Second, 5 * time.Second},
		{`{"ttl_s": 3600}`, time.Hour, 0},
	} {
		var cfg Config
		if err := json.Unmarshal([]byte(c.wire), &cfg); err != nil {
			t.Fatalf("%s: %v", c.wire, err)
		}
		if cfg.TTL != c.ttl || cfg.IdleTimeout != c.idle {
			t.Errorf("%s reads as TTL %v, IdleTimeout %v; want %v, %v", c.wire, cfg.TTL, cfg.IdleTimeout, c.ttl, c.idle)
		}
	}
	for _, c := range []struct {
		cfg       Config
		has, lack []string
	}{
		{Config{}, nil, []string{"ttl_s", "idle_timeout_s"}},
		{Config{TTL: Never, IdleTimeout: Never}, []string{`"ttl_s":0`, `"idle_timeout_s":0`}, nil},
		{Config{TTL: time.Hour}, []string{`"ttl_s":3600`}, []string{"idle_timeout_s"}},
		{Config{IdleTimeout: 15 * time.Minute}, []string{`"idle_timeout_s":900`}, []string{"ttl_s"}},
		// Under a second is not written as 0 (never) or left out (the default).
		{Config{TTL: 500 * time.Millisecond, IdleTimeout: time.Nanosecond}, []string{`"ttl_s":1`, `"idle_timeout_s":1`}, nil},
		{Config{TTL: -time.Millisecond}, []string{`"ttl_s":-1`}, nil},
	} {
		b, err := json.Marshal(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range c.has {
			if !strings.Contains(string(b), s) {
				t.Errorf("%+v is written %s, without %s", c.cfg, b, s)
			}
		}
		for _, s := range c.lack {
			if strings.Contains(string(b), s) {
				t.Errorf("%+v is written %s, with %s", c.cfg, b, s)
			}
		}
	}
}

// TestLifetimesRoundTrip: every value a Config can mean comes back as it
// was written.
func TestLifetimesRoundTrip(t *testing.T) {
	vals := []time.Duration{0, Never, time.Second, 90 * time.Second, time.Hour, MaxTTL}
	for _, ttl := range vals {
		for _, idle := range vals {
			in := Config{VCPUs: 1, MemoryMiB: 512, TTL: ttl, IdleTimeout: idle, IdlePause: time.Minute}
			b, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			var out Config
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if out.TTL != ttl || out.IdleTimeout != idle || out.IdlePause != time.Minute {
				t.Errorf("TTL %v, IdleTimeout %v went out as %s and came back %v, %v", ttl, idle, b, out.TTL, out.IdleTimeout)
			}
			if err := out.Validate(); err != nil {
				t.Errorf("%s: %v", b, err)
			}
		}
	}
}

// TestLifetimesOfAnOldSavedConfig: a config an older cellvm saved, where
// ttl_s and idle_timeout_s 0 meant none, still means none, whatever the
// daemon's defaults now are.
func TestLifetimesOfAnOldSavedConfig(t *testing.T) {
	old := `{"vcpus":1,"memory_mib":512,"ttl_s":0,"idle_timeout_s":0,"network":{"allow":["pypi.org"]}}`
	var cfg Config
	if err := json.Unmarshal([]byte(old), &cfg); err != nil {
		t.Fatal(err)
	}
	got, err := cfg.WithLifetimes(Lifetimes{DefaultTTL: time.Hour, DefaultIdleTimeout: 15 * time.Minute})
	if err != nil || got.TTL != Never || got.IdleTimeout != Never {
		t.Errorf("an old config with ttl_s 0 now has TTL %v, IdleTimeout %v (%v); want none", got.TTL, got.IdleTimeout, err)
	}
	// And it is saved again as it was.
	b, _ := json.Marshal(got)
	if !strings.Contains(string(b), `"ttl_s":0,"idle_timeout_s":0`) {
		t.Errorf("saved again as %s", b)
	}
}

func TestLifetimesValidate(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string // "" when valid
	}{
		{Config{}, ""},
		{Config{TTL: Never, IdleTimeout: Never}, ""},
		{Config{TTL: MaxTTL, IdleTimeout: time.Second}, ""},
		{Config{TTL: -time.Second}, "ttl_s -1"},
		{Config{TTL: -2}, "ttl_s"},
		{Config{IdleTimeout: -time.Second}, "idle_timeout_s -1"},
		{Config{TTL: MaxTTL + time.Second}, "ttl_s"},
		{Config{IdleTimeout: MaxTTL + time.Second}, "idle_timeout_s"},
	} {
		c.cfg.VCPUs, c.cfg.MemoryMiB = 1, 512
		err := c.cfg.Validate()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("TTL %v, IdleTimeout %v refused: %v", c.cfg.TTL, c.cfg.IdleTimeout, err)
		case c.field != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field)):
			t.Errorf("TTL %v, IdleTimeout %v: %v, want ErrInvalid naming %s", c.cfg.TTL, c.cfg.IdleTimeout, err, c.field)
		}
	}
	// Wire values that are neither absent, 0 nor in range.
	for _, w := range []string{`{"ttl_s": -1}`, `{"idle_timeout_s": -1}`, `{"ttl_s": 9223372036854775807}`, `{"ttl_s": -9223372036854775808}`} {
		var cfg Config
		if err := json.Unmarshal([]byte(w), &cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.WithDefaults().Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s validated: %v (TTL %v, IdleTimeout %v)", w, err, cfg.TTL, cfg.IdleTimeout)
		}
	}
}

// TestWithLifetimes: the defaults fill what a create leaves out, what it
// says is kept, and a cap refuses never and more, naming itself.
func TestWithLifetimes(t *testing.T) {
	def := Lifetimes{DefaultTTL: time.Hour, DefaultIdleTimeout: 15 * time.Minute}
	for _, c := range []struct {
		l             Lifetimes
		in            Config
		ttl, idle     time.Duration
		refusedNaming string
	}{
		{def, Config{}, time.Hour, 15 * time.Minute, ""},
		{def, Config{TTL: 2 * time.Hour}, 2 * time.Hour, 15 * time.Minute, ""},
		{def, Config{TTL: Never, IdleTimeout: Never}, Never, Never, ""},
		{def, Config{IdleTimeout: time.Minute}, time.Hour, time.Minute, ""},
		{Lifetimes{}, Config{}, Never, Never, ""},
		{Lifetimes{DefaultTTL: time.Hour}, Config{}, time.Hour, Never, ""},
		// Under a cap.
		{Lifetimes{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour}, Config{}, time.Hour, Never, ""},
		{Lifetimes{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour}, Config{TTL: 2 * time.Hour, IdleTimeout: Never}, 2 * time.Hour, Never, ""},
		{Lifetimes{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour}, Config{TTL: 2*time.Hour + time.Second}, 0, 0, "ttl_s 7201 is above this daemon's cap of 7200 s (serve --max-ttl)"},
		{Lifetimes{DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour}, Config{TTL: Never}, 0, 0, "ttl_s 0 (never): this daemon caps a sandbox's TTL at 7200 s (serve --max-ttl)"},
	} {
		got, err := c.in.WithLifetimes(c.l)
		if c.refusedNaming != "" {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.refusedNaming) {
				t.Errorf("%+v under %+v: %v, want ErrInvalid with %q", c.in, c.l, err, c.refusedNaming)
			}
			continue
		}
		if err != nil || got.TTL != c.ttl || got.IdleTimeout != c.idle {
			t.Errorf("%+v under %+v: TTL %v, IdleTimeout %v, %v; want %v, %v", c.in, c.l, got.TTL, got.IdleTimeout, err, c.ttl, c.idle)
		}
	}
}

func TestLifetimesOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		l    Lifetimes
		want string // "" when valid
	}{
		{Lifetimes{}, ""},
		{Lifetimes{DefaultTTL: time.Hour, DefaultIdleTimeout: 15 * time.Minute}, ""},
		{Lifetimes{DefaultTTL: time.Hour, MaxTTL: time.Hour}, ""},
		{Lifetimes{MaxTTL: time.Hour}, "--default-ttl 0 (none) with --max-ttl 1h0m0s"},
		{Lifetimes{DefaultTTL: 2 * time.Hour, MaxTTL: time.Hour}, "--default-ttl 2h0m0s is above --max-ttl 1h0m0s"},
		{Lifetimes{DefaultTTL: -time.Second}, "--default-ttl -1s is negative"},
		{Lifetimes{DefaultIdleTimeout: 1500 * time.Millisecond}, "--default-idle-timeout 1.5s: give whole seconds"},
		{Lifetimes{DefaultTTL: time.Hour, MaxTTL: MaxTTL + time.Hour}, "--max-ttl"},
	} {
		err := c.l.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.l, err, c.want)
		}
	}
}
