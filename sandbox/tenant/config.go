package tenant

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"

	"github.com/cellvm/cellvm/sandbox"
)

// Quotas are one tenant's caps; 0 is no cap.
type Quotas struct {
	// Sandboxes caps the tenant's sandboxes, paused and lost ones too.
	Sandboxes int `json:"max_sandboxes"`
	// VCPUs and MemoryMiB cap the sum over its sandboxes.
	VCPUs     int `json:"max_vcpus"`
	MemoryMiB int `json:"max_memory_mib"`
	// DiskMiB caps what its snapshots, workspaces and images take on
	// the host's disk: a snapshot, a pause, a create that makes a
	// workspace, or an image's making is refused once they take that
	// much.
	DiskMiB int64 `json:"max_disk_mib"`
	// CreatesPerMinute caps the rate of creates (forks too), with a
	// burst of as many.
	CreatesPerMinute int `json:"creates_per_minute"`
	// Images caps the tenant's own images (built, pulled, imported);
	// the operator's, which every tenant sees, do not count.
	Images int `json:"max_images"`
}

// DefaultMaxImages is the daemon's default max_images
// (serve --tenant-max-images).
const DefaultMaxImages = 32

// MaxQuota bounds each quota so sums cannot overflow.
const MaxQuota = 1 << 40

// Validate checks each cap is 0 or positive and bounded.
func (q Quotas) Validate() error {
	for _, c := range []struct {
		name string
		v    int64
	}{{"max_sandboxes", int64(q.Sandboxes)}, {"max_vcpus", int64(q.VCPUs)}, {"max_memory_mib", int64(q.MemoryMiB)},
		{"max_disk_mib", q.DiskMiB}, {"creates_per_minute", int64(q.CreatesPerMinute)}, {"max_images", int64(q.Images)}} {
		if c.v < 0 || c.v > MaxQuota {
			return fmt.Errorf("%s %d: want 0 (no cap) to %d", c.name, c.v, int64(MaxQuota))
		}
	}
	return nil
}

// Settings is what the operator's tenant file says of one tenant: caps
// that replace the daemon's defaults (a field left out keeps the
// default), and ranges of the operator's denied egress it opens for this
// tenant alone.
type Settings struct {
	Sandboxes          *int     `json:"max_sandboxes,omitempty"`
	VCPUs              *int     `json:"max_vcpus,omitempty"`
	MemoryMiB          *int     `json:"max_memory_mib,omitempty"`
	DiskMiB            *int64   `json:"max_disk_mib,omitempty"`
	CreatesPerMinute   *int     `json:"creates_per_minute,omitempty"`
	Images             *int     `json:"max_images,omitempty"`
	EgressAllowPrivate []string `json:"egress_allow_private,omitempty"`
	// MCPSessions caps the tenant's MCP sessions (0: the daemon's default).
	MCPSessions *int `json:"max_mcp_sessions,omitempty"`

	// allowPrivate is EgressAllowPrivate parsed.
	allowPrivate []netip.Prefix
}

// Apply returns q with the caps s sets replaced.
func (s Settings) Apply(q Quotas) Quotas {
	if s.Sandboxes != nil {
		q.Sandboxes = *s.Sandboxes
	}
	if s.VCPUs != nil {
		q.VCPUs = *s.VCPUs
	}
	if s.MemoryMiB != nil {
		q.MemoryMiB = *s.MemoryMiB
	}
	if s.DiskMiB != nil {
		q.DiskMiB = *s.DiskMiB
	}
	if s.CreatesPerMinute != nil {
		q.CreatesPerMinute = *s.CreatesPerMinute
	}
	if s.Images != nil {
		q.Images = *s.Images
	}
	return q
}

// AllowPrivate is the tenant's egress_allow_private, parsed.
func (s Settings) AllowPrivate() []netip.Prefix { return s.allowPrivate }

// File is the operator's tenant file (serve --tenant-config): JSON of
// the form {"tenants": {"alpha": {"max_sandboxes": 4, ...}}}. Decoding is
// strict: a misspelt cap that was silently ignored would leave a tenant
// without the cap the operator meant.
type File struct {
	Tenants map[string]Settings `json:"tenants"`
}

// MaxFileBytes bounds the tenant file.
const MaxFileBytes = 1 << 20

// LoadFile reads and checks the tenant file at path. Its errors name the
// file and the tenant or field at fault.
func LoadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tenant config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tenant config %s: %w", path, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("tenant config %s: larger than %d bytes", path, MaxFileBytes)
	}
	tf, err := ParseFile(b)
	if err != nil {
		return nil, fmt.Errorf("tenant config %s: %w", path, err)
	}
	return tf, nil
}

// ParseFile decodes and checks a tenant file's contents.
func ParseFile(b []byte) (*File, error) {
	var tf File
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		return nil, fmt.Errorf("not a tenant file ({\"tenants\": {\"NAME\": {\"max_sandboxes\": N, ...}}}): %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON object")
	}
	names := make([]string, 0, len(tf.Tenants))
	for name := range tf.Tenants {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := tf.Tenants[name]
		if err := sandbox.CheckTenantName(name); err != nil {
			return nil, err
		}
		if err := s.Apply(Quotas{}).Validate(); err != nil {
			return nil, fmt.Errorf("tenant %s: %v", name, err)
		}
		if s.MCPSessions != nil && (*s.MCPSessions < 0 || *s.MCPSessions > MaxQuota) {
			return nil, fmt.Errorf("tenant %s: max_mcp_sessions %d: want 0 to %d", name, *s.MCPSessions, int64(MaxQuota))
		}
		s.allowPrivate = nil
		for i, c := range s.EgressAllowPrivate {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, fmt.Errorf("tenant %s: egress_allow_private[%d] %q: want a CIDR prefix such as 10.1.0.0/16", name, i, clipString(c, 64))
			}
			s.allowPrivate = append(s.allowPrivate, p.Masked())
		}
		tf.Tenants[name] = s
	}
	return &tf, nil
}

// For returns what the file says of tenant (the zero Settings when
// nothing); f may be nil.
func (f *File) For(tenant string) Settings {
	if f == nil {
		return Settings{}
	}
	return f.Tenants[sandbox.Owner(tenant)]
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
