package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/cellvm/cellvm/agentclient"
)

// recover takes back the sandboxes an earlier manager (a daemon that died
// or was restarted) left in the state directory: a VMM process that still
// runs and whose agent answers is adopted as a running sandbox; anything
// else (a dead process, a half-made directory) is cleaned up, so nothing
// leaks across daemon restarts.
func (m *VMManager) recover() {
	dirs, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "sandboxes", "sb-*"))
	for _, dir := range dirs {
		id := filepath.Base(dir)
		s := &vmSandbox{id: id, dir: dir, created: time.Now()}
		var spec VMSpec
		b, err := os.ReadFile(filepath.Join(dir, specFile))
		if err == nil {
			err = json.Unmarshal(b, &spec)
		}
		if err == nil {
			s.proc, err = adoptVM(dir)
		}
		if err == nil && spec.Vsock != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.agent, err = agentclient.Dial(ctx, spec.Vsock.UDS)
			cancel()
			s.cid = spec.Vsock.CID
		}
		if err != nil || spec.Vsock == nil {
			m.log.Warn("cleaning up a sandbox left by an earlier daemon", "id", id, "reason", err)
			if s.proc != nil {
				s.proc.stop(3 * time.Second)
			}
			os.RemoveAll(dir)
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, specFile)); err == nil {
			s.created = fi.ModTime()
		}
		s.cfg = Config{VCPUs: spec.VCPUs, MemoryMiB: int(spec.MemoryMiB)}
		if b, err := os.ReadFile(filepath.Join(dir, configFile)); err == nil {
			json.Unmarshal(b, &s.cfg)
		}
		s.cfg = s.cfg.WithDefaults()
		s.state.Store(StateRunning)
		s.lastUsed.Store(time.Now().UnixNano())
		m.sandboxes[id] = s
		if s.cid >= m.nextCID {
			m.nextCID = s.cid + 1
		}
		go m.watch(s)
		m.log.Info("took back a running sandbox", "id", id, "pid", s.proc.pid)
	}
}
