package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// Announcer tells the host that the agent is up, so that the host need not
// poll for it (proto.ReadyPort): it connects to the host, writes the ready
// line and holds the connection until it ends, then connects again. A
// connection that ends after a while was reset by a snapshot (this is a
// restored machine, or one that carries on after its snapshot): it is
// followed at once by the next, the restored machine's signal. A refused
// connect (no host listens: the daemon has its signal, or was restarted)
// or one the host ends at once is retried after a backoff that doubles
// from minBackoff to maxBackoff, so a host that does not listen costs a
// connect every two seconds.
type Announcer struct {
	// Dial connects to the host's ReadyPort (vsock CID 2).
	Dial func() (net.Conn, error)
	// Line is what is written on each connection (ReadyLine).
	Line string
	Log  *slog.Logger

	// sleep waits d or until ctx ends (false); tests replace it.
	sleep func(ctx context.Context, d time.Duration) bool
	// now is the clock of a connection's life; tests replace it.
	now func() time.Time
}

// The announcer's pacing: a connection that lived at least stableConn
// was a real one (the host kept it), and the next follows at once.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = 2 * time.Second
	stableConn = time.Second
)

// ReadyLine is the line the agent writes on its ready connection:
// proto.ReadyPrefix and the kernel's boot id, which the host logs at most
// (it trusts nothing in it).
func ReadyLine() string {
	id := "-"
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "" && len(s) <= 40 {
			id = s
		}
	}
	return proto.ReadyPrefix + " " + id + "\n"
}

// Run announces until ctx ends.
func (a *Announcer) Run(ctx context.Context) {
	sleep, now := a.sleep, a.now
	if sleep == nil {
		sleep = sleepCtx
	}
	if now == nil {
		now = time.Now
	}
	log := a.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// The log is the guest's serial console, where every character is a
	// trip through the VMM (and under nested emulation a slow one): the
	// first announcement says the agent is up, at Info; the ones after a
	// snapshot or restore are on a start's path, and at Debug.
	announced := false
	backoff := minBackoff
	for ctx.Err() == nil {
		c, err := a.Dial()
		if err != nil {
			log.Debug("ready: host not listening", "err", err, "retry_in", backoff)
		} else {
			start := now()
			if !announced {
				log.Info("ready: announced to the host")
				announced = true
			} else {
				log.Debug("ready: announced to the host")
			}
			a.hold(ctx, c)
			if now().Sub(start) >= stableConn {
				backoff = minBackoff
				log.Debug("ready: connection ended (a snapshot or restore reset it); announcing again")
				continue
			}
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// hold writes the line on c and waits until c ends (or ctx), discarding
// whatever the host sends.
func (a *Announcer) hold(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := io.WriteString(c, a.Line); err != nil {
		return
	}
	io.Copy(io.Discard, c)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
