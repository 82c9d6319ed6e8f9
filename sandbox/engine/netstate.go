package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
)

// A sandbox's network policy is state: every change is saved in its
// directory before it is applied, and a daemon that takes the sandbox
// back (recover) applies what is saved. A daemon that dies between the
// two comes back with the new policy, never the old one.

// attachOptions are a sandbox's network attachment's options: the
// ranges of the operator's denied egress its tenant may reach.
func (m *VMManager) attachOptions(cfg sandbox.Config) []netpolicy.AttachOption {
	if m.opt.AllowPrivate == nil {
		return nil
	}
	if r := m.opt.AllowPrivate(sandbox.Owner(cfg.Tenant)); len(r) > 0 {
		return []netpolicy.AttachOption{netpolicy.WithAllowPrivate(r...)}
	}
	return nil
}

// egressReport is what s's network policy decided over its life, for its
// deleted or lost event; nil for a sandbox without a network.
func (m *VMManager) egressReport(s *vmSandbox) *sandbox.EgressReport {
	a := s.net // set before the sandbox runs; info reads it likewise
	if a == nil {
		return nil
	}
	r := &sandbox.EgressReport{}
	r.AllowedPackets, r.DroppedPackets = a.Counters()
	st := a.DNSStats()
	r.DNSForwarded, r.DNSRefused = st.Forwarded, st.Refused
	for _, n := range a.DNSNames() {
		if len(r.Names) == sandbox.MaxEgressNames {
			break
		}
		r.Names = append(r.Names, sandbox.DNSNameCount{Name: n.Name, Forwarded: n.Forwarded, Refused: n.Refused})
	}
	return r
}

// writeConfig saves a sandbox's config in its directory, atomically: a
// crash leaves the old file or the new one, never a part of either.
func writeConfig(dir string, cfg sandbox.Config) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, configFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, configFile))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save sandbox config in %s: %w", dir, err)
	}
	return nil
}

// setNetwork saves the new policy in the sandbox's state, then applies
// it. If applying fails the old policy is saved back. s.netMu is held
// throughout, so concurrent changes are saved in the order they apply.
func (m *VMManager) setNetwork(s *vmSandbox, pol egress.Policy) error {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	next := s.cfg
	next.Network = &sandbox.NetworkPolicy{Allow: pol.Entries()}
	if err := writeConfig(s.dir, next); err != nil {
		return fmt.Errorf("network: saving the policy before applying it: %w", err)
	}
	if err := s.net.Update(pol); err != nil {
		if werr := writeConfig(s.dir, s.cfg); werr != nil {
			m.log.Error("putting back the saved network policy after a failed update; a restarted daemon would apply the refused one",
				"id", s.id, "error", werr)
		}
		return fmt.Errorf("network: %w", err)
	}
	s.cfg.Network = next.Network
	return nil
}
