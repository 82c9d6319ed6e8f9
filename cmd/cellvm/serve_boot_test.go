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
		{[]string{"serve", "--vmm-pool", "-1"}, "--vmm-pool -1"},
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
			t.Errorf("%v: vmm pool %d, want the default %d", c.args, o.VMMPool, engine.DefaultVMMPool())
		}
		if o.BootTimeout != c.timeout || o.BootConcurrency != c.concurrency || o.BootQueue != c.engineQ {
			t.Errorf("%v: timeout %v, concurrency %d, queue %d; want %v, %d, %d", c.args, o.BootTimeout, o.BootConcurrency, o.BootQueue,
				c.timeout, c.concurrency, c.engineQ)
		}
	}

	// --vmm-pool 0 turns the pool off.
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	b := addServeBootFlags(fs)
	if err := fs.Parse([]string{"--vmm-pool", "0"}); err != nil || b.check() != nil {
		t.Fatalf("--vmm-pool 0: %v, %v", err, b.check())
	}
	var o engine.Options
	o.VMMPool = 9
	b.apply(&o)
	if o.VMMPool != 0 {
		t.Errorf("--vmm-pool 0 gave the engine a pool of %d", o.VMMPool)
	}

	// CELLVM_BOOT_TIMEOUT is the default, for tests and the rig; the flag wins.
	t.Setenv("CELLVM_BOOT_TIMEOUT", "3m")
	b = addServeBootFlags(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	if b.timeout != 3*time.Minute {
		t.Errorf("with CELLVM_BOOT_TIMEOUT=3m the default is %v", b.timeout)
	}
}
