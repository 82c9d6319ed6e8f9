package main

import (
	"reflect"
	"testing"
)

func TestParseDmesg(t *testing.T) {
	got := parseDmesg([]string{
		"[    0.000000] Linux version 6.1.0",
		"no timestamp here",
		"[   12.345678] x86/fpu: xstate_offset[2]:  576, xstate_sizes[2]:  256\r",
	})
	want := []dmesgLine{{0, "Linux version 6.1.0"}, {12.345678, "x86/fpu: xstate_offset[2]:  576, xstate_sizes[2]:  256\r"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseDmesg = %v, want %v", got, want)
	}
}

func TestAlignDmesg(t *testing.T) {
	c := parseDmesg([]string{
		"[ 0.000000] Linux version",
		"[ 0.010000] Memory: 241000K/262144K available",
		"[ 0.020000] virtio-mmio: Registering device virtio-mmio.0 at 0xd0000000-0xd0000fff, IRQ 5.",
		"[ 0.500000] Run /init as init process",
	})
	q := parseDmesg([]string{
		"[ 0.000000] Linux version",
		"[ 0.011000] Memory: 240000K/262144K available",
		"[ 0.015000] tsc: Fast TSC calibration using PIT",
		"[ 0.300000] Run /init as init process",
	})
	want := []dmesgRow{{0, 0}, {1, 1}, {2, -1}, {-1, 2}, {3, 3}}
	if got := alignDmesg(c, q); !reflect.DeepEqual(got, want) {
		t.Fatalf("alignDmesg = %v, want %v", got, want)
	}
	if s := largestSteps(c, 1); len(s) != 1 || s[0].i != 3 {
		t.Fatalf("largestSteps = %v, want the step before message 3", s)
	}
}
