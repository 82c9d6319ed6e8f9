package sandboxtest

import (
	"context"
	"strconv"

	"github.com/cellvm/cellvm/sandbox"
)

// The observation routes, and what a VM would do to them: logs the test
// appends to, events every change publishes, capacity from the caps.

// Lose makes the sandbox lost, as a VM that died would: its calls that
// need the guest are ErrLost from then on, and a lost event says why.
func (m *Manager) Lose(id string, why sandbox.LostInfo) error {
	return m.update(id, func(b *box) {
		b.info.State = sandbox.StateLost
		b.info.Lost = &why
		m.events.Publish(sandbox.Event{Type: sandbox.EventLost, Sandbox: id, Lost: &why, Tenant: b.info.Config.Tenant})
	})
}

// SetNetworkCounters sets the egress counters the sandbox's info reports.
func (m *Manager) SetNetworkCounters(id string, c sandbox.NetworkCounters) error {
	return m.update(id, func(b *box) { b.info.Network = c })
}

// AppendLog adds lines to one of the sandbox's logs, and so to its
// followers.
func (m *Manager) AppendLog(id string, src sandbox.LogSource, lines ...string) error {
	return m.update(id, func(b *box) {
		b.logs[src] = append(b.logs[src], lines...)
		m.changed.Broadcast()
	})
}

// update runs f on sandbox id, whatever its state, under m.mu.
func (m *Manager) update(id string, f func(*box)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.find(id)
	if err != nil {
		return err
	}
	f(b)
	return nil
}

// Logs reads the lines AppendLog added.
func (m *Manager) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	if err := m.enterLocked("Logs", id, string(req.Source), strconv.Itoa(req.Tail), strconv.FormatBool(req.Follow)); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := req.Validate(); err != nil {
		return err
	}
	b, err := m.find(id)
	if err != nil {
		return err
	}
	// Wake the wait below when ctx ends.
	stop := context.AfterFunc(ctx, func() { m.mu.Lock(); m.changed.Broadcast(); m.mu.Unlock() })
	defer stop()
	sent := max(len(b.logs[req.Source])-req.Tail, 0)
	for {
		for ; sent < len(b.logs[req.Source]); sent++ {
			l := sandbox.LogLine{Source: req.Source, Text: b.logs[req.Source][sent]}
			m.mu.Unlock()
			err := onLine(l)
			m.mu.Lock()
			if err != nil {
				return err
			}
		}
		if !req.Follow || ctx.Err() != nil {
			return nil
		}
		if m.boxes[id] != b {
			return nil // deleted
		}
		m.changed.Wait()
	}
}

func (m *Manager) Events(ctx context.Context) (sandbox.EventStream, error) {
	if err := m.enter("Events"); err != nil {
		return nil, err
	}
	return m.events.Subscribe(ctx)
}

func (m *Manager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	if err := m.enterLocked("Capacity"); err != nil {
		return sandbox.Capacity{}, err
	}
	defer m.mu.Unlock()
	c := sandbox.Capacity{MaxSandboxes: m.MaxSandboxes, Sandboxes: len(m.boxes), MaxMemoryMiB: m.MaxMemoryMiB, MemoryMiBUsed: m.memoryUsed()}
	for _, b := range m.boxes {
		c.VCPUsUsed += b.info.Config.VCPUs
	}
	return c, nil
}
