package e2b

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// fakeManager is sandboxtest's manager with the calls this package's
// control plane and port proxy need and the shared fake does not have
// yet: SetTTL (recorded, and read back by Get) and DialPort (to a local
// listener a test registers per sandbox and port).
type fakeManager struct {
	*sandboxtest.Manager
	now func() time.Time

	mu       sync.Mutex
	pauseErr error // Pause's answer, when set
	ttls     map[string]time.Duration
	ports    map[string]string // "ID:PORT" -> local address
}

func newFakeManager() *fakeManager {
	return &fakeManager{Manager: sandboxtest.New(), now: time.Now, ttls: map[string]time.Duration{}, ports: map[string]string{}}
}

func (f *fakeManager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	i, err := f.Manager.Get(ctx, id)
	return f.withTTL(i), err
}

func (f *fakeManager) List(ctx context.Context) ([]sandbox.Info, error) {
	l, err := f.Manager.List(ctx)
	for n := range l {
		l[n] = f.withTTL(l[n])
	}
	return l, err
}

func (f *fakeManager) withTTL(i sandbox.Info) sandbox.Info {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.ttls[i.ID]; ok {
		i.Config.TTL = t
	}
	return i
}

func (f *fakeManager) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	i, err := f.Manager.Get(ctx, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	if ttl < time.Second || ttl > sandbox.MaxTTL {
		return sandbox.Info{}, fmt.Errorf("%w: ttl out of range", sandbox.ErrInvalid)
	}
	f.mu.Lock()
	f.ttls[id] = f.now().Add(ttl).Sub(i.CreatedAt)
	f.mu.Unlock()
	return f.Get(ctx, id)
}

func (f *fakeManager) ttlOf(id string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.ttls[id]
	return t, ok
}

func (f *fakeManager) listen(id string, port int, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ports[fmt.Sprintf("%s:%d", id, port)] = addr
}

func (f *fakeManager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := f.Manager.Get(ctx, id); err != nil {
		return nil, err
	}
	f.mu.Lock()
	addr, ok := f.ports[fmt.Sprintf("%s:%d", id, port)]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrPortClosed)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// Pause answers pauseErr when one is set, else pauses.
func (f *fakeManager) Pause(ctx context.Context, id string) error {
	f.mu.Lock()
	err := f.pauseErr
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.Manager.Pause(ctx, id)
}
