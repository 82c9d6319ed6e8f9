package netpolicy

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// batch is a set of rule changes applied in one iptables-restore run: one
// process instead of one per rule (an iptables run costs tens of
// milliseconds), and one transaction, so a VM's rules appear, change and
// disappear as a whole.
type batch struct {
	lines map[string][]string // table -> restore lines
	order []string
}

func (b *batch) add(table, line string) {
	if b.lines == nil {
		b.lines = map[string][]string{}
	}
	if _, ok := b.lines[table]; !ok {
		b.order = append(b.order, table)
	}
	b.lines[table] = append(b.lines[table], line)
}

// chain declares a chain: created, or flushed if it exists.
func (b *batch) chain(table, name string) { b.add(table, ":"+name+" - [0:0]") }

func (b *batch) appendRules(rs []rule) {
	for _, r := range rs {
		b.add(r.Table, "-A "+r.Chain+" "+strings.Join(r.Spec, " "))
	}
}

// insertRules inserts rs at the top of their chains, keeping their order.
func (b *batch) insertRules(rs []rule) {
	for i := len(rs) - 1; i >= 0; i-- {
		b.add(rs[i].Table, "-I "+rs[i].Chain+" 1 "+strings.Join(rs[i].Spec, " "))
	}
}

func (b *batch) deleteRules(rs []rule) {
	for _, r := range rs {
		b.add(r.Table, "-D "+r.Chain+" "+strings.Join(r.Spec, " "))
	}
}

// deleteChains flushes and then deletes chains (flushing all first, since
// they may jump to each other).
func (b *batch) deleteChains(table string, names []string) {
	for _, n := range names {
		b.add(table, "-F "+n)
	}
	for _, n := range names {
		b.add(table, "-X "+n)
	}
}

func (b *batch) String() string {
	var s strings.Builder
	for _, t := range b.order {
		s.WriteString("*" + t + "\n")
		for _, l := range b.lines[t] {
			s.WriteString(l + "\n")
		}
		s.WriteString("COMMIT\n")
	}
	return s.String()
}

// apply runs the batch with iptables-restore --noflush; the caller is in
// the right namespace (the child inherits the thread's).
func (h *Host) apply(b *batch) error { return h.applyWith(h.restorePath, b) }

// applyWith runs the batch with restore (iptables-restore or
// ip6tables-restore).
func (h *Host) applyWith(restore string, b *batch) error {
	if len(b.order) == 0 {
		return nil
	}
	in := b.String()
	if strings.ContainsAny(in, "\"'\\\x00") {
		return fmt.Errorf("iptables-restore input with quoting characters refused")
	}
	cmd := exec.Command(restore, "--noflush", "--wait")
	cmd.Stdin = strings.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(restore), err, strings.TrimSpace(clip(out.String(), 512)))
	}
	return nil
}
