package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/audit"
)

// auditFlags are serve's audit log and client-address flags.
type auditFlags struct {
	file     string
	maxMiB   int64
	keep     int
	code     string
	trusted  prefixList
	stateDir string // set by serve: where the default file goes
}

// auditOff is the --audit-log value that turns the log off.
const auditOff = "off"

func addAuditFlags(fs *pflag.FlagSet) *auditFlags {
	f := &auditFlags{}
	fs.StringVar(&f.file, "audit-log", "", "the audit log: a JSON line for every request that creates, changes or runs something and every refused one (default STATE_DIR/audit.jsonl; \"off\": none)")
	fs.Int64Var(&f.maxMiB, "audit-max-mib", audit.DefaultMaxBytes>>20, "rotate the audit log when it would pass this size in MiB")
	fs.IntVar(&f.keep, "audit-keep", audit.DefaultKeep, "rotated audit logs kept (FILE.1 ... FILE.N)")
	fs.StringVar(&f.code, "audit-code", "hash", "what the audit log keeps of a cell's code or an exec's argv: hash (its SHA-256 and size) or full (the text too, clipped to 16 KiB)")
	fs.Var(&f.trusted, "trusted-proxy", "`CIDR[,CIDR...]` of proxies in front of --listen whose X-Forwarded-For names the client (for the auth gate's failure limit and the audit log's peer)")
	return f
}

func (f *auditFlags) check(listen string) error {
	if f.maxMiB < 1 || f.maxMiB > 1<<20 {
		return usagef("--audit-max-mib %d: want 1 to %d", f.maxMiB, 1<<20)
	}
	if f.keep < 1 || f.keep > 1000 {
		return usagef("--audit-keep %d: want 1 to 1000", f.keep)
	}
	if f.code != "hash" && f.code != "full" {
		return usagef("--audit-code %q: want hash or full", f.code)
	}
	if len(f.trusted) > 0 && listen == "" {
		return usagef("--trusted-proxy goes with --listen")
	}
	return nil
}

// path is the audit log's file, "" when it is off.
func (f *auditFlags) path(stateDir string) string {
	switch f.file {
	case auditOff:
		return ""
	case "":
		return filepath.Join(stateDir, "audit.jsonl")
	}
	return f.file
}

// open opens the audit log (nil when it is off) and returns the API's and
// the TCP gate's options for it, and what closes it.
func (f *auditFlags) open(stateDir string, log *slog.Logger) ([]api.Option, []api.GateOption, func(), error) {
	gate := []api.GateOption{api.WithTrustedProxies(f.trusted)}
	path := f.path(stateDir)
	if path == "" {
		log.Warn("audit log off (--audit-log off): requests are not recorded")
		return nil, gate, func() {}, nil
	}
	l, err := audit.Open(path, audit.Options{MaxBytes: f.maxMiB << 20, Keep: f.keep, FullCode: f.code == "full"})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w (--audit-log FILE puts it elsewhere; --audit-log off turns it off)", err)
	}
	log.Info("audit log", "file", path, "max_mib", f.maxMiB, "keep", f.keep, "code", f.code)
	return []api.Option{api.WithAudit(l)}, append(gate, api.WithGateAudit(l)), func() { l.Close() }, nil
}

// stateDirFor is the state directory serve uses for --socket and
// --state-dir, and where `cellvm audit` looks for the log.
func stateDirFor(socket, stateDir string) string {
	if stateDir != "" {
		return stateDir
	}
	if socket == "" {
		socket = DefaultSocket
	}
	return filepath.Join(filepath.Dir(socket), "state")
}
