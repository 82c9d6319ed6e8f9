package main

import (
	"fmt"
	"log/slog"
	"sort"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// tenantFlags are serve's flags for tenants: the per-tenant caps every
// tenant gets, and the file that changes them for some.
type tenantFlags struct {
	configFile string
	quotas     tenant.Quotas
	// file is the tenant file once loaded (nil: none).
	file *tenant.File
}

func addTenantFlags(fs *pflag.FlagSet) *tenantFlags {
	f := &tenantFlags{}
	fs.StringVar(&f.configFile, "tenant-config", "", "JSON file of per-tenant settings: {\"tenants\": {\"NAME\": {\"max_sandboxes\": N, \"max_vcpus\": N, \"max_memory_mib\": N, \"max_disk_mib\": N, \"creates_per_minute\": N, \"max_images\": N, \"egress_allow_private\": [CIDR...]}}}")
	fs.IntVar(&f.quotas.Sandboxes, "tenant-max-sandboxes", 0, "cap on each tenant's sandboxes (0: only the host's cap)")
	fs.IntVar(&f.quotas.VCPUs, "tenant-max-vcpus", 0, "cap on the vCPUs of each tenant's sandboxes together (0: none)")
	fs.IntVar(&f.quotas.MemoryMiB, "tenant-max-memory-mib", 0, "cap on the memory in MiB of each tenant's sandboxes together (0: only the host's cap)")
	fs.Int64Var(&f.quotas.DiskMiB, "tenant-max-disk-mib", 0, "cap on the disk in MiB each tenant's snapshots, workspaces and images take (0: only the host's caps)")
	fs.IntVar(&f.quotas.Images, "tenant-max-images", tenant.DefaultMaxImages, "cap on each tenant's own images, built, pulled or imported (0: none)")
	fs.IntVar(&f.quotas.CreatesPerMinute, "tenant-creates-per-minute", 120, "cap on each tenant's creates per minute, forks included (0: none)")
	return f
}

// check validates the caps before anything starts.
func (f *tenantFlags) check() error {
	if err := f.quotas.Validate(); err != nil {
		return usagef("--tenant-*: %v", err)
	}
	return nil
}

// load reads the tenant file, if any; its errors name the file and what
// is wrong.
func (f *tenantFlags) load() (*tenant.File, error) {
	if f.configFile == "" {
		return nil, nil
	}
	tf, err := tenant.LoadFile(f.configFile)
	if err != nil {
		return nil, usageError{err}
	}
	f.file = tf
	return tf, nil
}

// checkEgress checks a tenant's allowlist against the operator's egress
// rules, with the ranges the tenant file opens for it.
func (o *serveOptions) checkEgress(t string, allow []string) error {
	g := o.egress.guard.WithAllowPrivate(o.tenants.file.For(t).AllowPrivate()...)
	if err := g.Check(allow); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrInvalid, err)
	}
	return nil
}

// knownTenants is the set of tenants the operator may act for: the
// default, the token file's and the tenant file's.
func knownTenants(tokens *api.Tokens, tf *tenant.File) map[string]bool {
	known := map[string]bool{sandbox.DefaultTenant: true}
	for _, t := range tokens.Tenants() {
		known[t] = true
	}
	if tf != nil {
		for t := range tf.Tenants {
			known[t] = true
		}
	}
	return known
}

// logTenants states the tenants and their caps at start.
func logTenants(log *slog.Logger, known map[string]bool, f *tenantFlags, tf *tenant.File) {
	names := make([]string, 0, len(known))
	for t := range known {
		names = append(names, t)
	}
	sort.Strings(names)
	log.Info("tenants", "names", names, "max_sandboxes", f.quotas.Sandboxes, "max_vcpus", f.quotas.VCPUs,
		"max_memory_mib", f.quotas.MemoryMiB, "max_disk_mib", f.quotas.DiskMiB, "creates_per_minute", f.quotas.CreatesPerMinute,
		"overrides", tf != nil && len(tf.Tenants) > 0)
}
