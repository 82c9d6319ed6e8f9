package netpolicy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
)

// Holding the chain position. Everything cellvm does hangs off one jump at
// the top of each built-in chain (hostJumps, ip6Jumps). Another manager of
// the host's firewall (Docker, kube-proxy, a distribution's firewall
// service) that restarts inserts its own rules at the top and may accept
// a guest's packets before cellvm's chains see them. So the jumps are
// checked at start, after every Attach and Update, and on a timer
// (HostConfig.PositionCheck); one that is not first is moved back on top
// in one transaction, and each repair is logged. Other rules are left as
// they are, below.

// DefaultPositionCheck is how often the jumps are checked.
const DefaultPositionCheck = 5 * time.Second

// ip6Chain drops IPv6 on cellvm links; FORWARD and INPUT jump to it first.
const ip6Chain = "CELLVM6"

// ip6Rules keep IPv6 off cellvm links even if a link got an IPv6 address
// despite disable_ipv6: no policy opens IPv6.
var ip6Rules = []rule{
	{"filter", ip6Chain, []string{"-i", linkPrefix + "+", "-j", "DROP"}},
	{"filter", ip6Chain, []string{"-o", linkPrefix + "+", "-j", "DROP"}},
}

func ip6Jumps() []rule {
	return []rule{
		{"filter", "FORWARD", []string{"-j", ip6Chain}},
		{"filter", "INPUT", []string{"-j", ip6Chain}},
	}
}

// family is iptables or ip6tables, with the restore tool of the same kind.
type family struct {
	name    string
	ipt     *iptables.IPTables
	restore string
	jumps   []rule
}

func (h *Host) families() []family {
	out := []family{{"IPv4", h.ipt, h.restorePath, hostJumps()}}
	if h.ipt6 != nil {
		out = append(out, family{"IPv6", h.ipt6, h.restore6Path, ip6Jumps()})
	}
	return out
}

// holdPosition puts each jump back at the top of its chain where it is
// not, and logs each repair.
func (h *Host) holdPosition() error {
	h.holdMu.Lock()
	defer h.holdMu.Unlock()
	return h.ns.do(func() error {
		var errs []error
		for _, f := range h.families() {
			for _, j := range f.jumps {
				if err := h.holdJump(f, j); err != nil {
					errs = append(errs, fmt.Errorf("%s %s %s: %w", f.name, j.Table, j.Chain, err))
				}
			}
		}
		return errors.Join(errs...)
	})
}

func (h *Host) holdJump(f family, j rule) error {
	want := "-A " + j.Chain + " " + strings.Join(j.Spec, " ")
	listed, err := f.ipt.List(j.Table, j.Chain)
	if err != nil {
		return err
	}
	first := ""
	var b batch
	for _, l := range listed {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "-A ") {
			continue // the policy line
		}
		if first == "" {
			if l == want {
				return nil
			}
			first = l
		}
		if l == want {
			b.deleteRules([]rule{j})
		}
	}
	b.insertRules([]rule{j})
	if err := h.applyWith(f.restore, &b); err != nil {
		return err
	}
	h.log.Warn("a rule was above cellvm's jump; the jump is back on top", "family", f.name,
		"table", j.Table, "chain", j.Chain, "first_rule_was", first)
	return nil
}

// checkPosition holds the position after a rule change; a failure is
// logged (the timer tries again).
func (h *Host) checkPosition() {
	if err := h.holdPosition(); err != nil {
		h.log.Error("checking cellvm's jumps at the top of the host's chains", "err", err)
	}
}

// holdLoop checks the jumps every PositionCheck until Close. A failing
// check is logged when its error changes, not every period.
func (h *Host) holdLoop() {
	defer close(h.holdDone)
	t := time.NewTicker(h.cfg.PositionCheck)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-h.closing:
			return
		case <-t.C:
		}
		msg := ""
		if err := h.holdPosition(); err != nil {
			msg = err.Error()
		}
		if msg != last {
			if msg != "" {
				h.log.Error("checking cellvm's jumps at the top of the host's chains", "err", msg)
			} else {
				h.log.Info("checking cellvm's jumps works again")
			}
			last = msg
		}
	}
}

// Close stops the position checks. The attachments are their owners' to
// close. It is safe to call more than once.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		close(h.closing)
		<-h.holdDone
	})
	return nil
}
