package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/cellpolicy"
)

// auditFlags are serve's audit log and client-address flags.
type auditFlags struct {
	file    string
	maxMiB  int64
	keep    int
	code    string
	trusted prefixList

	// The sandbox-end watcher (watchEnds): stopped by open's closer,
	// which serve runs after the manager's, so that the ends a shutdown
	// makes are recorded too.
	log  *audit.Log
	ends *endWatcher
}

// endWatcher is the sandbox-end watcher's stream, which Close ends.
type endWatcher struct {
	mu      sync.Mutex
	st      sandbox.EventStream
	stopped bool
	done    chan struct{}
}

// swap makes st the stream, unless the watcher was stopped.
func (w *endWatcher) swap(st sandbox.EventStream) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		st.Close()
		return false
	}
	w.st = st
	return true
}

// stop closes the stream and waits for the events it held to be written.
func (w *endWatcher) stop() {
	w.mu.Lock()
	w.stopped = true
	w.st.Close()
	w.mu.Unlock()
	<-w.done
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
	f.log = l
	closeAll := func() {
		if f.ends != nil {
			f.ends.stop()
		}
		l.Close()
	}
	return []api.Option{api.WithAudit(l)}, append(gate, api.WithGateAudit(l)), closeAll, nil
}

// watchEnds writes a record (audit.ActionSandboxEnd) for each sandbox
// that ends, however it ends: deleted through the API, by its TTL or idle
// timeout, at shutdown, or lost. It does nothing when the log is off.
func (f *auditFlags) watchEnds(m sandbox.Manager, log *slog.Logger) error {
	if f.log == nil {
		return nil
	}
	// The operator's view: every tenant's sandboxes (a tenant.Manager
	// refuses a stream without a caller).
	ctx := sandbox.WithCaller(context.Background(), sandbox.Caller{Operator: true, Peer: "audit"})
	st, err := m.Events(ctx)
	if err != nil {
		return fmt.Errorf("audit log: watching sandbox ends: %w", err)
	}
	w := &endWatcher{st: st, done: make(chan struct{})}
	f.ends = w
	go func() {
		defer close(w.done)
		for {
			ev, err := st.Next(context.Background())
			if errors.Is(err, sandbox.ErrEventsLagged) {
				// Say so in the log itself, and watch again.
				f.writeEnd(log, audit.Record{Action: audit.ActionSandboxEnd, Error: "events_lagged",
					Reason: "the audit log fell behind the sandbox events: some sandbox ends before this one are not recorded"})
				if st, err = m.Events(ctx); err == nil && w.swap(st) {
					continue
				}
				return
			}
			if err != nil {
				return // the stream was closed (shutdown)
			}
			if rec, ok := endRecord(ev); ok {
				f.writeEnd(log, rec)
			}
		}
	}()
	return nil
}

// endRecord is the record of a deleted or lost event, with the
// sandbox's egress verdicts over its life when the event carries them.
func endRecord(ev sandbox.Event) (audit.Record, bool) {
	rec := audit.Record{Time: ev.Time, Action: audit.ActionSandboxEnd, Sandbox: ev.Sandbox, Tenant: ev.Tenant}
	if e := ev.Egress; e != nil {
		rec.Egress = &audit.Egress{Allowed: e.AllowedPackets, Dropped: e.DroppedPackets, DNSForwarded: e.DNSForwarded, DNSRefused: e.DNSRefused}
		for _, n := range e.Names {
			rec.Egress.Names = append(rec.Egress.Names, audit.EgressName{Name: n.Name, Forwarded: n.Forwarded, Refused: n.Refused})
		}
	}
	switch ev.Type {
	case sandbox.EventDeleted:
		rec.Reason = "deleted: " + ev.Reason
	case sandbox.EventLost:
		rec.ResultStatus = "lost"
		if ev.Lost != nil {
			rec.Reason, rec.KilledBy = "lost: "+ev.Lost.Reason, ev.Lost.KilledBy
		}
	default:
		return rec, false
	}
	if e := ev.Egress; e != nil {
		rec.Egress = &audit.Egress{Allowed: e.AllowedPackets, Dropped: e.DroppedPackets, DNSForwarded: e.DNSForwarded, DNSRefused: e.DNSRefused}
		for _, n := range e.Names {
			rec.Egress.Names = append(rec.Egress.Names, audit.EgressName{Name: n.Name, Forwarded: n.Forwarded, Refused: n.Refused})
		}
	}
	return rec, true
}

func (f *auditFlags) writeEnd(log *slog.Logger, rec audit.Record) {
	if err := f.log.Write(rec); err != nil {
		log.Error("audit log: a sandbox end was not written", "sandbox", rec.Sandbox, "err", err)
	}
}

// policyRefusal returns the cell policy hook's refusal recorder: a record
// of its own (audit.ActionPolicyRefused) beside the request's, written
// by the daemon from the hook's verdict, so a cell that prints a
// PolicyRefused error of its own cannot pass for one. nil when the log is
// off.
func (f *auditFlags) policyRefusal(log *slog.Logger) func(context.Context, cellpolicy.Refusal) {
	if f.log == nil {
		return nil
	}
	l := f.log
	return func(ctx context.Context, r cellpolicy.Refusal) {
		rec := audit.Record{Time: time.Now().UTC(), Action: audit.ActionPolicyRefused, Tenant: r.Tenant, Sandbox: r.Sandbox,
			Reason: r.Reason, ResultStatus: r.Kind}
		if c, ok := sandbox.CallerFrom(ctx); ok {
			rec.TokenID, rec.Peer, rec.Operator = c.TokenID, c.Peer, c.Operator
		}
		if r.HookFailed {
			rec.Error = "hook_failed"
		}
		if err := l.Write(rec); err != nil {
			log.Error("audit log: a cell policy refusal was not written", "sandbox", r.Sandbox, "err", err)
		}
	}
}
