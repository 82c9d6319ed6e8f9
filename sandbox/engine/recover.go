package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
	"github.com/cellvm/cellvm/vmm/control"
)

// recover takes back the sandboxes an earlier manager (a daemon that died
// or was restarted) left in the state directory: a VMM process that still
// runs, is the one its record names (adoptVM: pid, start time, cgroup;
// never its argv, which it can rewrite) and whose agent answers is
// adopted as a running sandbox; anything else (a dead process, a
// half-made directory) is cleaned up, its cgroup killed and removed, and
// last the cgroups of this state directory's VMs that nothing owns are
// swept, so nothing leaks across daemon restarts.
func (m *VMManager) recover() {
	defer m.reseedAdopted() // after the network, which a fork's reseed sets
	defer m.recoverNetwork()
	ours := m.vmNames()
	defer m.sweepCgroups(ours)
	m.sweepPartialSnapshots()
	dirs, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "sandboxes", "sb-*"))
	for _, dir := range dirs {
		id := filepath.Base(dir)
		s := &vmSandbox{id: id, dir: dir, created: time.Now()}
		spec, err := control.ReadSpec(filepath.Join(dir, specFile))
		if err == nil {
			s.proc, err = adoptVM(dir)
			if errors.Is(err, os.ErrNotExist) {
				for _, pid := range killUnrecorded(dir) {
					m.log.Warn("killed a VMM an earlier daemon started and never recorded", "id", id, "pid", pid)
				}
			}
		}
		if err == nil && spec.Vsock != nil {
			// spec.Vsock.UDS is the VMM's own path (the jail's, if
			// jailed); the daemon's is in the sandbox's directory. The
			// agent announced itself to the daemon that started it, so
			// no signal comes: it is dialled directly.
			s.agent, err = awaitAgent(context.Background(), s.proc, dir, 10*time.Second, "being taken back", nil)
			s.cid = spec.Vsock.CID
		}
		if spec.Jail != nil && spec.Jail.Cgroup != "" {
			s.cgroup = jail.CgroupAt(spec.Jail.Cgroup)
		}
		pausedBack := s.proc == nil && m.takeBackPaused(s, spec)
		if pausedBack {
			err = nil
		} else if err == nil {
			keepBacking(dir)
		}
		if err != nil || spec.Vsock == nil {
			m.log.Warn("cleaning up a sandbox left by an earlier daemon", "id", id, "reason", err)
			if s.proc != nil {
				s.proc.stop(3 * time.Second)
			}
			s.cgroup.Close()
			os.RemoveAll(dir)
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, specFile)); err == nil {
			s.created = fi.ModTime()
		}
		s.cfg = sandbox.Config{VCPUs: spec.VCPUs, MemoryMiB: int(spec.MemoryMiB)}
		if b, err := os.ReadFile(filepath.Join(dir, configFile)); err == nil {
			json.Unmarshal(b, &s.cfg)
		}
		// A config saved before lifetimes had defaults, or none saved,
		// keeps what it had: no lifetime.
		s.cfg, _ = s.cfg.WithDefaults().WithLifetimes(sandbox.Lifetimes{})
		if b, err := os.ReadFile(filepath.Join(dir, startedFromFile)); err == nil {
			switch from := string(b); from {
			case sandbox.StartedFromBoot, sandbox.StartedFromTemplate, sandbox.StartedFromSnapshot:
				s.startedFrom = from
			}
		}
		s.lastUsed.Store(time.Now().UnixNano())
		m.sandboxes[id] = s
		if s.cid >= m.nextCID {
			m.nextCID = s.cid + 1
		}
		if pausedBack {
			m.log.Info("took back a paused sandbox", "id", id)
			continue
		}
		s.lc.adopt(phaseRunning)
		go m.watch(s)
		m.log.Info("took back a running sandbox", "id", id, "pid", s.proc.pid)
	}
}

// vmNames are the names of every VM this state directory holds: its
// sandboxes', its template builds' and its image builds'. A VM's cgroup
// is named after it (jailVM).
func (m *VMManager) vmNames() map[string]bool {
	names := map[string]bool{}
	for _, pat := range []string{
		filepath.Join(m.opt.StateDir, "sandboxes", "sb-*"),
		filepath.Join(m.opt.StateDir, "templates", templateBuildPref+"*"),
		filepath.Join(m.imageBuildDir(), "*"),
	} {
		dirs, _ := filepath.Glob(pat)
		for _, d := range dirs {
			names[strings.TrimPrefix(filepath.Base(d), templateBuildPref)] = true
		}
	}
	return names
}

// sweepCgroups kills and removes the cgroups an earlier daemon left under
// the jail's cgroup parent that no sandbox taken back owns: a VMM that
// daemon started but died before recording (its record, procRecord, is
// written after the process starts), and a cgroup made before the VMM's
// spec was written. The parent may be shared by daemons of other state
// directories (one host, several nodes or tests), so only the cgroups of
// VMs this state directory holds (ours, by name) are swept.
func (m *VMManager) sweepCgroups(ours map[string]bool) {
	if m.opt.Jail == nil || m.opt.Jail.CgroupParent == "" {
		return
	}
	keep := map[string]bool{}
	for _, s := range m.sandboxes {
		if s.cgroup != nil && s.proc != nil {
			keep[s.cgroup.Path] = true
		}
	}
	for _, path := range sweepCgroups(m.opt.Jail.CgroupParent, ours, keep) {
		m.log.Warn("removed a VM's cgroup an earlier daemon left, and killed what ran in it", "cgroup", path)
	}
}

// sweepCgroups kills and removes each cgroup under parent named in ours
// and not in keep (paths), and returns the paths it swept.
func sweepCgroups(parent string, ours, keep map[string]bool) []string {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var swept []string
	for _, e := range ents {
		path := filepath.Join(parent, e.Name())
		if !e.IsDir() || !ours[e.Name()] || keep[path] {
			continue
		}
		// Close kills what runs in it (cgroup.kill), then removes it.
		jail.CgroupAt(path).Close()
		swept = append(swept, path)
	}
	return swept
}

// recoverNetwork removes the network objects of sandboxes that are gone and
// re-attaches the policies of those taken back (their TAPs survive).
func (m *VMManager) recoverNetwork() {
	if m.opt.Net == nil {
		return
	}
	var live []string
	for id := range m.sandboxes {
		live = append(live, id)
	}
	if err := m.opt.Net.Sweep(live); err != nil {
		m.log.Error("sweep stale sandbox networks", "error", err)
	}
	for id, s := range m.sandboxes {
		if s.cfg.Network == nil || len(s.cfg.Network.Allow) == 0 {
			continue
		}
		p, err := egress.Parse(s.cfg.Network.Allow)
		if err == nil {
			s.net, err = m.opt.Net.Attach(context.Background(), id, p, m.attachOptions(s.cfg)...)
		}
		if err != nil {
			m.log.Error("re-attach a taken-back sandbox's network; it has none now", "id", id, "error", err)
		}
	}
}

// checkNetworkState refuses a manager without network support over a
// state directory whose sandboxes have network: it could neither enforce
// their policies nor remove their links and rules, which would stay as
// they are, half open, for as long as it ran.
func (m *VMManager) checkNetworkState() error {
	if m.opt.Net != nil {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(m.opt.StateDir, "sandboxes", "sb-*"))
	var found []string
	for _, dir := range dirs {
		var cfg sandbox.Config
		b, err := os.ReadFile(filepath.Join(dir, configFile))
		if err != nil || json.Unmarshal(b, &cfg) != nil || cfg.Network == nil || len(cfg.Network.Allow) == 0 {
			continue
		}
		id := filepath.Base(dir)
		found = append(found, fmt.Sprintf("%s (link cvm-%s, chains CELLVM-%s-*)", id, netpolicy.Tag(id), netpolicy.Tag(id)))
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the state directory %s holds sandboxes with network: %s; a daemon without network support can "+
		"neither enforce their policies nor remove their network. Start the daemon once with network support (as root, "+
		"--network) on this state directory: it takes the running ones back and removes what the others left (SIGTERM "+
		"then destroys them all). Or remove them by hand: stop their VMMs, delete the links and chains named above "+
		"(ip link delete cvm-<tag>; iptables-save | grep CELLVM-<tag>) and their directories",
		sandbox.ErrNotSupported, m.opt.StateDir, strings.Join(found, ", "))
}
