package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// SetTTL implements Manager: E2B's setTimeout, "live ttl more from now".
//
// The reaper (reapLoop) ends a sandbox once time since its creation passes
// its Config.TTL, so the new deadline is kept as a new total TTL: the
// sandbox's age, rounded up to a whole second, plus ttl. The config on
// disk is rounded to seconds and a daemon taking the sandbox back counts
// its age from the same start (its spec file's time), so a restart keeps
// the deadline, never shortens it. The cap is the operator's --max-ttl
// (or the contract's MaxTTL) on ttl, not on the total: a caller that keeps
// a sandbox alive by renewing it, as E2B's SDK users do, may.
//
// A sandbox still starting is ErrBusy (its config is being written); a
// paused one gets its new TTL without waking.
func (m *VMManager) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	limit := m.opt.MaxTTL
	if limit <= 0 {
		limit = sandbox.MaxTTL
	}
	if ttl < time.Second || ttl > limit {
		return sandbox.Info{}, fmt.Errorf("%w: ttl %d s out of range 1..%d s (the most this daemon gives a sandbox at a time)",
			sandbox.ErrInvalid, int64(ttl/time.Second), int64(limit/time.Second))
	}
	s, err := m.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if s.State() == sandbox.StateStarting {
		return sandbox.Info{}, fmt.Errorf("%w: sandbox %s is still starting", sandbox.ErrBusy, id)
	}
	// netMu serialises writers of the config (setNetwork does the same);
	// m.mu guards cfg.TTL against the reaper, which reads it under m.mu.
	s.netMu.Lock()
	age := time.Since(s.created)
	total := (age + time.Second - 1).Truncate(time.Second) + ttl.Truncate(time.Second)
	next := s.cfg
	next.TTL = total
	if err := writeConfig(s.dir, next); err != nil {
		s.netMu.Unlock()
		return sandbox.Info{}, fmt.Errorf("ttl: %w", err)
	}
	m.mu.Lock()
	s.cfg.TTL = total
	m.mu.Unlock()
	s.netMu.Unlock()
	m.log.Info("sandbox TTL set", "id", id, "ttl_s", int64(ttl/time.Second), "total_ttl_s", int64(total/time.Second))
	return m.info(s), nil
}
