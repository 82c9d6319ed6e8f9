package engine

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// lostConsoleLines is how many of the console's last lines a lost
// sandbox's info keeps.
const lostConsoleLines = 20

// lostConsole returns the console's last lines, each bounded, for a lost
// sandbox's info: often the only account of how its guest ended.
func lostConsole(dir string) []string {
	tail := lastLines(consoleTail(dir, 8192), lostConsoleLines)
	if tail == "" {
		return nil
	}
	lines := strings.Split(tail, "\n")
	for i, l := range lines {
		lines[i] = logLine(sandbox.LogConsole, []byte(l)).Text
	}
	return lines
}

// Events implements Manager.
func (m *VMManager) Events(ctx context.Context) (sandbox.EventStream, error) {
	return m.events.Subscribe(ctx)
}

// Logs implements Manager: the console and the agent's records come from
// the console file the VMM writes, the VMM's own log from its stderr file.
func (m *VMManager) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	if err := req.Validate(); err != nil {
		return err
	}
	s, err := m.get(id)
	if err != nil {
		return err
	}
	file := consoleFile
	if req.Source == sandbox.LogVMM {
		file = vmmLogFile
	}
	gone := func() bool { _, err := m.get(id); return err != nil }
	return readLog(ctx, filepath.Join(s.dir, file), req, gone, onLine)
}

// Capacity implements Manager.
func (m *VMManager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	m.mu.Lock()
	c := sandbox.Capacity{MaxSandboxes: m.opt.MaxSandboxes, MaxMemoryMiB: m.opt.MaxMemoryMiB, Sandboxes: m.countSandboxes()}
	for _, s := range m.sandboxes {
		c.MemoryMiBUsed += s.heldMemoryMiB() // a paused one holds none
		c.VCPUsUsed += s.cfg.VCPUs
	}
	m.mu.Unlock()
	c.Templates = m.templates.list()
	c.TemplateLockedMiB = mib(m.templates.lockedBytes())
	q := m.admit.stats()
	c.Boots = &q
	c.VMMPool = m.pool.info()
	return c, nil
}
