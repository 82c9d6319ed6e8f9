package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// `cellvm ls`, `cellvm cp -r` and `cellvm port-forward`: the guest's
// files and ports through the daemon's file and port routes.

// lsCommand is `cellvm ls SANDBOX PATH`.
func (a *app) lsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls SANDBOX PATH",
		Short: "list a directory in a daemon's sandbox (as the cell user; --user root in a root sandbox)",
		Args:  exactArgs(2, "SANDBOX and PATH"),
	}
	long := cmd.Flags().BoolP("long", "l", false, "show type, mode, owner, size and time")
	depth := cmd.Flags().Int("depth", 1, fmt.Sprintf("levels to list (1..%d)", sandbox.MaxListDepth))
	user := cmd.Flags().String("user", "", "the guest user: user (default) or root")
	return a.daemonCommandChecked(cmd, func([]string) error {
		if *depth < 1 || *depth > sandbox.MaxListDepth {
			return usagef("--depth %d out of 1..%d", *depth, sandbox.MaxListDepth)
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		ents, err := c.ListDir(ctx, args[0], sandbox.FileRequest{Path: args[1], Depth: *depth, User: *user})
		if err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, ents)
		}
		base, _ := sandbox.GuestPath(args[1])
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 1, ' ', 0)
		for _, e := range ents {
			name := strings.TrimPrefix(e.Path, base+"/")
			if e.Type == sandbox.FileTypeDir {
				name += "/"
			}
			if e.SymlinkTarget != "" {
				name += " -> " + e.SymlinkTarget
			}
			if *long {
				fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d\t%s\t%s\n", typeChar(e.Type), fs.FileMode(e.Mode).Perm().String()[1:], e.Owner, e.Group, e.Size, e.ModTime.Format("2006-01-02 15:04"), name)
			} else {
				fmt.Fprintln(tw, name)
			}
		}
		return tw.Flush()
	})
}

func typeChar(t string) string {
	switch t {
	case sandbox.FileTypeDir:
		return "d"
	case sandbox.FileTypeSymlink:
		return "l"
	case sandbox.FileTypeOther:
		return "?"
	}
	return "-"
}

// copyTreeIn copies the local directory src to the sandbox's dst, as
// `cp -r` does: into dst/NAME when dst is a directory already, to dst
// otherwise. Regular files and directories are copied; anything else is
// named on stderr and skipped.
func (a *app) copyTreeIn(ctx context.Context, c *api.Client, src, id, dst string) error {
	if st, err := c.StatPath(ctx, id, sandbox.FileRequest{Path: dst}); err == nil && st.Type == sandbox.FileTypeDir {
		dst = path.Join(dst, filepath.Base(filepath.Clean(src)))
	} else if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	var files, bytes int64
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		remote := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			_, err := c.MakeDir(ctx, id, sandbox.FileRequest{Path: remote})
			return err
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := c.Upload(ctx, id, remote, f)
			files, bytes = files+1, bytes+n
			return err
		}
		fmt.Fprintf(a.stderr, "cellvm cp: skipped %s (not a regular file or directory)\n", p)
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "copied %d files (%d bytes) to %s:%s\n", files, bytes, id, dst)
	return nil
}

// copyTreeOut copies the sandbox's directory src to the local dst, as
// `cp -r` does. Each directory is listed on its own, so no depth bound
// applies; symlinks and other files are named and skipped.
func (a *app) copyTreeOut(ctx context.Context, c *api.Client, id, src, dst string) error {
	src, err := sandbox.GuestPath(src)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, path.Base(src))
	}
	var files, bytes int64
	var walk func(remote, local string) error
	walk = func(remote, local string) error {
		if err := os.MkdirAll(local, 0o755); err != nil {
			return err
		}
		ents, err := c.ListDir(ctx, id, sandbox.FileRequest{Path: remote})
		if err != nil {
			return err
		}
		for _, e := range ents {
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\\") {
				return fmt.Errorf("the sandbox listed a bad name %q in %s", e.Name, remote)
			}
			lp := filepath.Join(local, e.Name)
			switch e.Type {
			case sandbox.FileTypeDir:
				if err := walk(path.Join(remote, e.Name), lp); err != nil {
					return err
				}
			case sandbox.FileTypeFile:
				n, err := downloadTo(ctx, c, id, path.Join(remote, e.Name), lp)
				if err != nil {
					return err
				}
				files, bytes = files+1, bytes+n
			default:
				fmt.Fprintf(a.stderr, "cellvm cp: skipped %s:%s (%s)\n", id, path.Join(remote, e.Name), e.Type)
			}
		}
		return nil
	}
	if err := walk(src, dst); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "copied %d files (%d bytes) from %s:%s\n", files, bytes, id, src)
	return nil
}

// downloadTo writes the guest file to local through a partial file
// renamed into place.
func downloadTo(ctx context.Context, c *api.Client, id, remote, local string) (int64, error) {
	tmp := local + ".cellvm-partial"
	f, err := os.Create(tmp)
	if err != nil {
		return 0, err
	}
	n, err := c.Download(ctx, id, remote, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, local)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return n, err
}

// portForwardCommand is `cellvm port-forward SANDBOX [LOCAL:]PORT`.
func (a *app) portForwardCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "port-forward SANDBOX [LOCAL:]PORT",
		Short: "forward a local TCP port to a port a process in a daemon's sandbox listens on (until interrupted)",
		Long: "Forward a local TCP port to a port a process in the sandbox listens on (127.0.0.1, then ::1, in the guest). " +
			"LOCAL defaults to PORT; 0 picks a free one. The sandbox needs no network: the daemon carries the bytes over vsock. " +
			"The address forwarded is printed on stdout (--json: {\"address\",\"sandbox\",\"port\"}); it runs until interrupted.",
		Args: exactArgs(2, "SANDBOX and [LOCAL:]PORT"),
	}
	addr := cmd.Flags().String("address", "127.0.0.1", "the local address to listen on")
	var local, port int
	return a.daemonCommandChecked(cmd, func(args []string) error {
		var err error
		local, port, err = parsePortSpec(args[1])
		return err
	}, func(ctx context.Context, c *api.Client, args []string) error {
		id := args[0]
		// Refuse at once what the daemon refuses (an unknown sandbox).
		if _, err := c.Get(ctx, id); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(*addr, strconv.Itoa(local)))
		if err != nil {
			return err
		}
		defer ln.Close()
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		if a.jsonOut {
			printJSONLine(a.stdout, map[string]any{"address": ln.Addr().String(), "sandbox": id, "port": port})
		} else {
			fmt.Fprintf(a.stdout, "%s\n", ln.Addr())
			fmt.Fprintf(a.stderr, "forwarding %s -> %s:%d (ctrl-c ends it)\n", ln.Addr(), id, port)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			nc, err := ln.Accept()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				guest, err := c.DialPort(ctx, id, port)
				if err != nil {
					fmt.Fprintf(a.stderr, "cellvm port-forward: %v\n", err)
					return
				}
				defer guest.Close()
				stopped := context.AfterFunc(ctx, func() { nc.Close(); guest.Close() })
				defer stopped()
				pipeBoth(nc, guest)
			}()
		}
	})
}

// parsePortSpec reads [LOCAL:]PORT.
func parsePortSpec(s string) (local, port int, err error) {
	l, p, found := strings.Cut(s, ":")
	if !found {
		p = l
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < sandbox.MinPort || port > sandbox.MaxPort {
		return 0, 0, usagef("port %q is not a number in %d..%d", p, sandbox.MinPort, sandbox.MaxPort)
	}
	local, err = strconv.Atoi(l)
	if err != nil || local < 0 || local > sandbox.MaxPort {
		return 0, 0, usagef("local port %q is not a number in 0..%d", l, sandbox.MaxPort)
	}
	return local, port, nil
}

// pipeBoth copies both ways, half-closing each side at its end.
func pipeBoth(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// copyTree is `cp -r` when its source is a directory; done is false when
// it is a file, which the plain copy handles.
func (a *app) copyTree(ctx context.Context, c *api.Client, src, dst string) (done bool, err error) {
	if id, p, remote := splitRemote(dst); remote {
		st, err := os.Stat(src)
		if err != nil || !st.IsDir() {
			return false, nil
		}
		return true, a.copyTreeIn(ctx, c, src, id, p)
	}
	id, p, _ := splitRemote(src)
	st, err := c.StatPath(ctx, id, sandbox.FileRequest{Path: p})
	if err != nil {
		return true, err
	}
	if st.Type != sandbox.FileTypeDir {
		return false, nil
	}
	return true, a.copyTreeOut(ctx, c, id, p, dst)
}
