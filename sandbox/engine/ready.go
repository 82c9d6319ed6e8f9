package engine

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/vmm/control"
)

// The agent says when it is up (proto.ReadyPort), so a starting VM costs
// no polling: the daemon listens on the VMM's "<vsock uds>_<ReadyPort>"
// before it starts (or restores) the VMM, the agent's announcement
// arrives there, and the daemon dials the agent once. The poll that stays
// beside it, every readyFallback, is for a snapshot or pause image made by
// an agent that never signals; a VM taken back by a restarted daemon has
// no signal coming and is dialled directly (recover).
var readyFallback = 500 * time.Millisecond

// readyPath is the host path of the socket where the VMM of spec connects
// the agent's ready signal: its vsock socket's path, seen from the host,
// and "_<ReadyPort>". A jailed VMM's socket is in the jail's /run, a bind
// of the sandbox's run directory, where the socket is found.
func readyPath(spec *control.Spec) (string, error) {
	uds := spec.Vsock.UDS
	if spec.Jail != nil {
		host := ""
		for _, b := range spec.Jail.Binds {
			if b.Writable && b.Target == filepath.Dir(uds) {
				host = filepath.Join(b.Source, filepath.Base(uds))
			}
		}
		if host == "" {
			return "", fmt.Errorf("ready socket: the jail binds no writable directory at %s", filepath.Dir(uds))
		}
		uds = host
	}
	return uds + "_" + strconv.Itoa(proto.ReadyPort), nil
}

// listenReady opens the ready socket for the VMM of spec, connectable by
// its jail's user (the VMM dials it after dropping root); nil for a spec
// without vsock.
func listenReady(spec *control.Spec) (*agentclient.ReadyListener, error) {
	if spec.Vsock == nil {
		return nil, nil
	}
	path, err := readyPath(spec)
	if err != nil {
		return nil, err
	}
	uid, gid := -1, -1
	if spec.Jail != nil {
		uid, gid = spec.Jail.UID, spec.Jail.GID
	}
	return agentclient.ListenReady(path, uid, gid)
}
