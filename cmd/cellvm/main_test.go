package main

import (
	"os"
	"testing"

	"github.com/cellvm/cellvm/stwguard"
)

// TestMain lets the test binary stand in for the cellvm binary: with
// CELLVM_TEST_MAIN=1 it runs cellvm's main on its arguments instead of the
// tests, so the tests exercise the real command, exit status included,
// without building a second binary (which matters in the slow nested rig).
func TestMain(m *testing.M) {
	// This binary is the daemon in its tests, as cellvm is in production
	// (main.go): the same guard against a minute-long stop-the-world.
	stwguard.Start()
	if os.Getenv("CELLVM_TEST_MAIN") == "1" {
		// The daemon's VMMs are this binary too: they need the variable
		// (and only it; the engine gives a VMM no other environment).
		vmmExeEnv = []string{"CELLVM_TEST_MAIN=1"}
		if os.Getenv("CELLVM_TEST_FAKE_MANAGER") == "1" {
			os.Exit(runWith(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, fakeDeps()))
		}
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if dir := os.Getenv(envIndexRole); dir != "" {
		os.Exit(serveIndex(dir))
	}
	if role := os.Getenv("CELLVM_TEST_GUEST"); role != "" {
		os.Exit(guestRole(role))
	}
	os.Exit(m.Run())
}
