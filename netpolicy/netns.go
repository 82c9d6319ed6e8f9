package netpolicy

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsRunner runs host-side work in one network namespace. The daemon works
// in its own namespace (path ""), where nothing needs switching; tests and
// a daemon that keeps guests' links in a dedicated namespace give a path.
//
// What it switches is the calling thread: netlink sockets, listening and
// dialling sockets, /proc/sys/net files and the iptables processes started
// from that thread (a child inherits its parent thread's namespaces) all
// belong to the namespace they were made in, and keep it after the thread
// switches back.
type nsRunner struct {
	path string
}

func (r nsRunner) do(fn func() error) error {
	if r.path == "" {
		return fn()
	}
	target, err := netns.GetFromPath(r.path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", r.path, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s: %w", r.path, err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime ends it with this
			// goroutine instead of reusing a thread in the wrong namespace.
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// dial opens a connection from the namespace.
func (r nsRunner) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := r.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// freebind lets a socket bind an address before its link is up.
func freebind(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// writeSysctl writes a /proc/sys/net file in the namespace.
func (r nsRunner) writeSysctl(path, value string) error {
	return r.do(func() error {
		return os.WriteFile(path, []byte(value), 0o644)
	})
}
