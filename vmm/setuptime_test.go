package vmm

import (
	"regexp"
	"testing"
)

func TestSetupTimes(t *testing.T) {
	var s setupTimes
	if s.String() != "" {
		t.Fatalf("no marks: %q, want empty", s.String())
	}
	s.mark("")
	s.mark("kvm")
	s.mark("")
	s.mark("kernel")
	if !regexp.MustCompile(`^kvm=[0-9]+\.[0-9]ms kernel=[0-9]+\.[0-9]ms$`).MatchString(s.String()) {
		t.Fatalf("setup times %q: want kvm=Nms kernel=Nms", s.String())
	}
}
