package process

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/jail"
)

func TestJailCheck(t *testing.T) {
	j := &jail.Spec{UID: 1234, GID: 1234}
	probeErr := errors.New("EPERM")
	for _, c := range []struct {
		name      string
		spec      *jail.Spec
		uid, mode int
		err       error
		refused   bool
	}{
		{"jailed", j, 1234, 2, nil, false},
		{"jailed, still root", j, 0, 2, nil, true},
		{"jailed, no filter", j, 1234, 0, nil, true},
		{"jailed, strict mode", j, 1234, 1, nil, true},
		{"jailed, another uid", j, 4321, 2, nil, true},
		{"jailed, probe failed", j, 1234, -1, probeErr, true},
		{"no jail, root", nil, 0, 0, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			check := jailCheck(c.spec, log, func() (int, int, error) { return c.uid, c.mode, c.err })
			err := check()
			if (err != nil) != c.refused {
				t.Fatalf("check = %v, refused want %v", err, c.refused)
			}
			if err != nil && !strings.Contains(err.Error(), "jail self-check") {
				t.Errorf("error %q does not say what refused", err)
			}
			if !strings.Contains(logs.String(), `msg="first queue pop"`) {
				t.Errorf("no first queue pop line in %q", logs.String())
			}
		})
	}
}

// TestSelfProbe: in this (unjailed) test process, the probe reads our own
// uid and seccomp mode 0, and a jailed check of it refuses.
func TestSelfProbe(t *testing.T) {
	uid, mode, err := selfProbe()
	if err != nil {
		t.Fatal(err)
	}
	if mode != 0 {
		t.Skipf("this test runs under seccomp mode %d already", mode)
	}
	var logs bytes.Buffer
	check := jailCheck(&jail.Spec{UID: uid + 1}, slog.New(slog.NewTextHandler(&logs, nil)), selfProbe)
	if err := check(); err == nil {
		t.Fatal("a jailed check passed an unjailed process")
	}
	if !strings.Contains(logs.String(), "seccomp=0") {
		t.Errorf("log %q lacks seccomp=0", logs.String())
	}
}
