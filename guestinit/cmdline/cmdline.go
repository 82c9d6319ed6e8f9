// Package cmdline reads the cellvm.* keys the host passes to the guest on
// the kernel command line. The host is trusted, but the command line is
// still parsed defensively: lengths are bounded, every value is checked,
// and a bad key is reported and ignored rather than stopping the boot.
package cmdline

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Bounds.
const (
	// MaxCmdline is how much of /proc/cmdline is read (the x86 kernel's
	// own limit is 2048; leave room for larger configurations).
	MaxCmdline = 4096
	// MaxValue bounds one value.
	MaxValue = 256
	// MaxDNS bounds the number of name servers.
	MaxDNS = 3
)

// Defaults.
const (
	DefaultHostname = "cellvm"
	DefaultRoot     = "/dev/vda"
)

// Config is what the init takes from the command line.
type Config struct {
	// Time is the host's wall clock at VM start (cellvm.time, Unix
	// seconds with an optional fraction); zero when not given.
	Time time.Time
	// Hostname (cellvm.hostname), default DefaultHostname.
	Hostname string
	// Root is the root image's block device (cellvm.root), default
	// DefaultRoot; "none" keeps the initramfs as root.
	Root string
	// Addr, Gateway and DNS configure eth0 (cellvm.ip=addr/prefix,
	// cellvm.gw=ip, cellvm.dns=ip[,ip...]). Addr is invalid when the VM
	// has no network.
	Addr    netip.Prefix
	Gateway netip.Addr
	DNS     []netip.Addr
	// Debug turns on debug logging (cellvm.debug=1).
	Debug bool
	// CellsRoot runs cells and commands as root (cellvm.cellsroot=1, the
	// sandbox's "root" option) rather than as the cells' user.
	CellsRoot bool
	// Workspace is the block device of a persistent volume to mount at
	// /workspace (cellvm.workspace); empty when the sandbox has none.
	Workspace string
}

// Parse reads the cellvm.* keys from a kernel command line. Unknown
// cellvm.* keys and bad values are returned as warnings; other keys are
// the kernel's and are ignored.
func Parse(line string) (Config, []error) {
	c := Config{Hostname: DefaultHostname, Root: DefaultRoot}
	var warns []error
	if len(line) > MaxCmdline {
		warns = append(warns, fmt.Errorf("command line is %d bytes; reading the first %d", len(line), MaxCmdline))
		line = line[:MaxCmdline]
	}
	for _, field := range strings.Fields(line) {
		key, val, _ := strings.Cut(field, "=")
		if !strings.HasPrefix(key, "cellvm.") {
			continue
		}
		if len(val) > MaxValue {
			warns = append(warns, fmt.Errorf("%s: value is %d bytes (max %d)", key, len(val), MaxValue))
			continue
		}
		if err := c.set(key, val); err != nil {
			warns = append(warns, fmt.Errorf("%s=%q: %w", key, val, err))
		}
	}
	if c.Gateway.IsValid() && !c.Addr.IsValid() {
		warns = append(warns, fmt.Errorf("cellvm.gw without cellvm.ip: ignored"))
		c.Gateway = netip.Addr{}
	}
	if c.Addr.IsValid() && c.Gateway.IsValid() && c.Addr.Addr().Is4() != c.Gateway.Is4() {
		warns = append(warns, fmt.Errorf("cellvm.gw %v is not in the address family of cellvm.ip %v: ignored", c.Gateway, c.Addr))
		c.Gateway = netip.Addr{}
	}
	return c, warns
}

func (c *Config) set(key, val string) error {
	switch key {
	case "cellvm.time":
		t, err := parseUnix(val)
		if err != nil {
			return err
		}
		c.Time = t
	case "cellvm.hostname":
		if !validHostname(val) {
			return fmt.Errorf("not a valid host name")
		}
		c.Hostname = val
	case "cellvm.root":
		if val != "none" && (!strings.HasPrefix(val, "/dev/") || strings.Contains(val, "..")) {
			return fmt.Errorf("want a /dev/ path or none")
		}
		c.Root = val
	case "cellvm.workspace":
		if !strings.HasPrefix(val, "/dev/") || strings.Contains(val, "..") || len(val) > 64 {
			return fmt.Errorf("want a /dev/ path")
		}
		c.Workspace = val
	case "cellvm.ip":
		p, err := netip.ParsePrefix(val)
		if err != nil {
			return err
		}
		if a := p.Addr(); !a.IsGlobalUnicast() && !a.IsPrivate() || a.Zone() != "" {
			return fmt.Errorf("not a unicast address")
		}
		if p.Bits() == 0 {
			return fmt.Errorf("prefix length 0")
		}
		c.Addr = p
	case "cellvm.gw":
		a, err := netip.ParseAddr(val)
		if err != nil {
			return err
		}
		if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return fmt.Errorf("not a usable gateway")
		}
		c.Gateway = a
	case "cellvm.dns":
		var dns []netip.Addr
		for _, s := range strings.Split(val, ",") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return err
			}
			if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
				return fmt.Errorf("%v is not a usable name server", a)
			}
			dns = append(dns, a)
		}
		if len(dns) > MaxDNS {
			return fmt.Errorf("%d name servers (max %d)", len(dns), MaxDNS)
		}
		c.DNS = dns
	case "cellvm.debug":
		b, err := strconv.ParseBool(val)
		if err != nil {
			return err
		}
		c.Debug = b
	case "cellvm.cellsroot":
		b, err := strconv.ParseBool(val)
		if err != nil {
			return err
		}
		c.CellsRoot = b
	default:
		return fmt.Errorf("unknown key")
	}
	return nil
}

// parseUnix parses "seconds[.fraction]" since the Unix epoch, for dates
// between 2000 and 2200.
func parseUnix(s string) (time.Time, error) {
	secS, fracS, hasFrac := strings.Cut(s, ".")
	if secS == "" || len(secS) > 11 || len(fracS) > 9 || hasFrac && fracS == "" {
		return time.Time{}, fmt.Errorf("want seconds[.fraction]")
	}
	sec, err := strconv.ParseInt(secS, 10, 64)
	if err != nil || secS[0] == '+' || secS[0] == '-' {
		return time.Time{}, fmt.Errorf("want seconds[.fraction]")
	}
	var nsec int64
	if hasFrac {
		n, err := strconv.ParseUint(fracS, 10, 32)
		if err != nil || fracS[0] == '+' {
			return time.Time{}, fmt.Errorf("bad fraction")
		}
		nsec = int64(n)
		for range 9 - len(fracS) {
			nsec *= 10
		}
	}
	const y2000, y2200 = 946684800, 7258118400
	if sec < y2000 || sec >= y2200 {
		return time.Time{}, fmt.Errorf("%d is not between 2000 and 2200", sec)
	}
	return time.Unix(sec, nsec), nil
}

func validHostname(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
