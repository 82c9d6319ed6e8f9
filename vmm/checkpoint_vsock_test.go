package vmm

import (
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/virtiotest"
	"github.com/cellvm/cellvm/virtio/vsock"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A restore of a state taken live (a checkpoint: ResetVsock) puts the
// transport reset event on the guest's vsock event queue before the
// guest runs; a restore of a Save's state (which reset it before the
// save) does not reset it again.
func TestRestoreOfLiveStateResetsVsock(t *testing.T) {
	const evQueue = 2 // rx, tx, event
	for _, live := range []bool{false, true} {
		dev, err := vsock.New(3, filepath.Join(t.TempDir(), "v.sock"), nil)
		if err != nil {
			t.Fatal(err)
		}
		h := virtiotest.Start(t, dev, ^uint64(0), 64)
		h.Queues[evQueue].Post(virtiotest.W(4))
		h.Kick(evQueue)
		m := &Machine{log: slog.New(slog.DiscardHandler)}
		m.snap.devices = []*virtioSlot{{dev: dev, t: h.MMIO}}
		m.resetVsockAfterRestore(&snapshot.State{ResetVsock: live})
		u, got := h.TryWait(evQueue, 300*time.Millisecond)
		if got != live {
			t.Errorf("ResetVsock=%v: an event came: %v", live, got)
		}
		if got && (u.Len != 4 || binary.LittleEndian.Uint32(u.Data) != vsock.EventTransportReset) {
			t.Errorf("event %+v, want TRANSPORT_RESET", u)
		}
	}
}
