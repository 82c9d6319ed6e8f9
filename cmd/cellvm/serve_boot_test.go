package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox/engine"
	"github.com/spf13/pflag"
)

// serve's boot flags: bad values stop it before anything starts, and
// good ones reach the engine's options (--boot-queue 0 is "none wait",
// the engine's -1; the default is the engine's 4 per slot).
func TestServeBootFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--boot-timeout", "0s"}, "--boot-timeout 0s"},
		{[]string{"serve", "--boot-timeout", "2h"}, "--boot-timeout 2h0m0s"},
		{[]string{"serve", "--boot-concurrency", "0"}, "--boot-concurrency 0"},
		{[]string{"serve", "--boot-queue", "-2"}, "--boot-queue -2"},
		{[]string{"serve", "--vmm-pool", "-2"}, "--vmm-pool -2"},
		{[]string{"serve", "--vmm-pool", "65"}, "--vmm-pool 65"},
	} {
		var out, errb strings.Builder
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.msg)
		}
	}

	t.Setenv("CELLVM_BOOT_TIMEOUT", "")
	for _, c := range []struct {
		args                 []string
		timeout              time.Duration
		concurrency, engineQ int
	}{
		{nil, 60 * time.Second, engine.DefaultBootConcurrency(), 0},
		{[]string{"--boot-timeout", "3m", "--boot-concurrency", "2", "--boot-queue", "0"}, 3 * time.Minute, 2, -1},
		{[]string{"--boot-queue", "9"}, 60 * time.Second, engine.DefaultBootConcurrency(), 9},
	} {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		b := addServeBootFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if err := b.check(); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		var o engine.Options
		b.apply(&o)
		if o.VMMPool != engine.DefaultVMMPool() {
			t.Errorf("%v: vmm pool %d, want the host's size %d by default", c.args, o.VMMPool, engine.DefaultVMMPool())
		}
		if o.BootTimeout != c.timeout || o.BootConcurrency != c.concurrency || o.BootQueue != c.engineQ {
			t.Errorf("%v: timeout %v, concurrency %d, queue %d; want %v, %d, %d", c.args, o.BootTimeout, o.BootConcurrency, o.BootQueue,
				c.timeout, c.concurrency, c.engineQ)
		}
	}

	// --vmm-pool -1 sizes the pool to the host; 0 is none; N is N.
	for arg, want := range map[string]int{"-1": engine.DefaultVMMPool(), "0": 0, "3": 3} {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		b := addServeBootFlags(fs)
		if err := fs.Parse([]string{"--vmm-pool", arg}); err != nil || b.check() != nil {
			t.Fatalf("--vmm-pool %s: %v, %v", arg, err, b.check())
		}
		var o engine.Options
		b.apply(&o)
		if o.VMMPool != want {
			t.Errorf("--vmm-pool %s gave the engine a pool of %d, want %d", arg, o.VMMPool, want)
		}
	}

	// CELLVM_BOOT_TIMEOUT is the default, for tests and the rig; the flag wins.
	t.Setenv("CELLVM_BOOT_TIMEOUT", "3m")
	b := addServeBootFlags(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	if b.timeout != 3*time.Minute {
		t.Errorf("with CELLVM_BOOT_TIMEOUT=3m the default is %v", b.timeout)
	}
}
