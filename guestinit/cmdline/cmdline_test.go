package cmdline

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseFull(t *testing.T) {
	line := "console=ttyS0 reboot=k panic=-1 cellvm.time=1700000000.25 cellvm.hostname=box-1 " +
		"cellvm.ip=10.200.0.2/30 cellvm.gw=10.200.0.1 cellvm.dns=10.200.0.1,1.1.1.1 cellvm.root=/dev/vdb cellvm.debug=1\n"
	c, warns := Parse(line)
	if len(warns) != 0 {
		t.Fatalf("warnings: %v", warns)
	}
	if want := time.Unix(1700000000, 250_000_000); !c.Time.Equal(want) {
		t.Errorf("Time = %v, want %v", c.Time, want)
	}
	if c.Hostname != "box-1" || c.Root != "/dev/vdb" || !c.Debug {
		t.Errorf("hostname/root/debug = %q %q %v", c.Hostname, c.Root, c.Debug)
	}
	if c.Addr != netip.MustParsePrefix("10.200.0.2/30") || c.Gateway != netip.MustParseAddr("10.200.0.1") {
		t.Errorf("addr %v gw %v", c.Addr, c.Gateway)
	}
	if len(c.DNS) != 2 || c.DNS[1] != netip.MustParseAddr("1.1.1.1") {
		t.Errorf("DNS = %v", c.DNS)
	}
}

func TestParseWorkspace(t *testing.T) {
	c, warns := Parse("console=ttyS0 cellvm.workspace=/dev/vdb")
	if len(warns) != 0 || c.Workspace != "/dev/vdb" {
		t.Errorf("Parse workspace = %q, %v", c.Workspace, warns)
	}
	if c, _ := Parse("console=ttyS0"); c.Workspace != "" {
		t.Errorf("no cellvm.workspace gave %q", c.Workspace)
	}
}

func TestParseDefaults(t *testing.T) {
	c, warns := Parse("console=ttyS0 quiet")
	if len(warns) != 0 || c.Hostname != DefaultHostname || c.Root != DefaultRoot || !c.Time.IsZero() || c.Addr.IsValid() || c.DNS != nil {
		t.Fatalf("Parse defaults = %+v, %v", c, warns)
	}
}

func TestParseRejectsBadValues(t *testing.T) {
	for _, field := range []string{
		"cellvm.time=abc", "cellvm.time=-5", "cellvm.time=+1700000000", "cellvm.time=99", "cellvm.time=1700000000.",
		"cellvm.time=1700000000.1234567890", "cellvm.time=99999999999",
		"cellvm.hostname=-bad", "cellvm.hostname=a.b", "cellvm.hostname=" + strings.Repeat("a", 64),
		"cellvm.ip=10.0.0.1", "cellvm.ip=224.0.0.1/4", "cellvm.ip=10.0.0.1/0", "cellvm.ip=fe80::1%eth0/64",
		"cellvm.gw=0.0.0.0", "cellvm.dns=1.1.1.1,x", "cellvm.dns=1.1.1.1,1.1.1.2,1.1.1.3,1.1.1.4",
		"cellvm.root=/etc/passwd", "cellvm.root=/dev/../etc", "cellvm.unknown=1", "cellvm.debug=maybe",
		"cellvm.workspace=vdb", "cellvm.workspace=/dev/../etc/shadow", "cellvm.workspace=",
		"cellvm.hostname=" + strings.Repeat("a", MaxValue+1),
	} {
		c, warns := Parse(field)
		if len(warns) != 1 {
			t.Errorf("Parse(%q): %d warnings %v, want 1", field, len(warns), warns)
		}
		if c.Hostname != DefaultHostname || c.Root != DefaultRoot || !c.Time.IsZero() || c.Addr.IsValid() || c.Gateway.IsValid() || c.DNS != nil || c.Debug || c.Workspace != "" {
			t.Errorf("Parse(%q) changed the config: %+v", field, c)
		}
	}
}

func TestGatewayNeedsMatchingAddress(t *testing.T) {
	if c, warns := Parse("cellvm.gw=10.0.0.1"); len(warns) != 1 || c.Gateway.IsValid() {
		t.Errorf("gw without ip: %+v %v", c, warns)
	}
	if c, warns := Parse("cellvm.ip=10.0.0.2/24 cellvm.gw=fd00::1"); len(warns) != 1 || c.Gateway.IsValid() || !c.Addr.IsValid() {
		t.Errorf("mixed families: %+v %v", c, warns)
	}
}

func TestParseBoundsLength(t *testing.T) {
	line := strings.Repeat("x ", MaxCmdline) + " cellvm.hostname=late"
	c, warns := Parse(line)
	if c.Hostname != DefaultHostname || len(warns) != 1 {
		t.Fatalf("keys past MaxCmdline were read: %+v %v", c, warns)
	}
}

func TestLastValueWins(t *testing.T) {
	c, _ := Parse("cellvm.hostname=a cellvm.hostname=b")
	if c.Hostname != "b" {
		t.Fatalf("Hostname = %q, want b", c.Hostname)
	}
}
