package sandboxtest

import (
	"context"
	"fmt"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// SetTTL gives the sandbox ttl more to live, as the VM manager does. The
// fake's clock stands still at its creation, so the new total TTL is ttl
// in whole seconds; nothing reaps it. The cap is Lifetimes.MaxTTL, or the
// contract's MaxTTL without one. It is noted as "ttl ID N s".
func (m *Manager) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	if err := m.enterLocked("SetTTL", id, ttl.String()); err != nil {
		return sandbox.Info{}, err
	}
	defer m.mu.Unlock()
	limit := m.Lifetimes.MaxTTL
	if limit <= 0 {
		limit = sandbox.MaxTTL
	}
	if ttl < time.Second || ttl > limit {
		return sandbox.Info{}, fmt.Errorf("%w: ttl %d s out of range 1..%d s", sandbox.ErrInvalid, int64(ttl/time.Second), int64(limit/time.Second))
	}
	b, err := m.find(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	b.info.Config.TTL = ttl.Truncate(time.Second)
	m.note("ttl %s %d s", id, int64(ttl/time.Second))
	return b.info, nil
}
