package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// cmdSandbox is `cellvm sandbox create|ls|inspect|rm`, through the daemon.
func cmdSandbox(args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		return 2, usageError{fmt.Errorf("usage: cellvm sandbox create|ls|inspect|rm [flags]")}
	}
	fs := flag.NewFlagSet("sandbox "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	var memory, vcpus *int
	var ttl, idle *time.Duration
	if args[0] == "create" {
		memory = fs.Int("memory", sandbox.DefaultMemoryMiB, "guest memory in MiB")
		vcpus = fs.Int("vcpus", sandbox.DefaultVCPUs, "vCPUs")
		ttl = fs.Duration("ttl", 0, "destroy the sandbox after this long (0: never)")
		idle = fs.Duration("idle-timeout", 0, "destroy the sandbox after this long unused (0: never)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2, usageError{err}
	}
	c, err := b.remoteOnly()
	if err != nil {
		return 1, err
	}
	defer c.Close()
	ctx := context.Background()
	switch args[0] {
	case "create":
		info, err := c.Create(ctx, sandbox.Config{VCPUs: *vcpus, MemoryMiB: *memory, TTL: *ttl, IdleTimeout: *idle})
		if err != nil {
			return 1, err
		}
		if *b.jsonOut {
			return 0, printJSON(stdout, info)
		}
		fmt.Fprintln(stdout, info.ID)
	case "ls":
		list, err := c.List(ctx)
		if err != nil {
			return 1, err
		}
		if *b.jsonOut {
			return 0, printJSON(stdout, list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tVCPUS\tMEMORY\tUPTIME\tCELLS")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d MiB\t%s\t%d\n", s.ID, s.State, s.Config.VCPUs, s.Config.MemoryMiB,
				(time.Duration(s.UptimeS) * time.Second).String(), s.Cells)
		}
		tw.Flush()
	case "inspect":
		if fs.NArg() != 1 {
			return 2, usageError{fmt.Errorf("usage: cellvm sandbox inspect ID")}
		}
		info, err := c.Get(ctx, fs.Arg(0))
		if err != nil {
			return 1, err
		}
		return 0, printJSON(stdout, info)
	case "rm":
		if fs.NArg() == 0 {
			return 2, usageError{fmt.Errorf("usage: cellvm sandbox rm ID...")}
		}
		code := 0
		for _, id := range fs.Args() {
			if err := c.Delete(ctx, id); err != nil {
				fmt.Fprintf(stderr, "cellvm sandbox rm %s: %v\n", id, err)
				code = 1
			}
		}
		return code, nil
	default:
		return 2, usageError{fmt.Errorf("unknown sandbox command %q (create, ls, inspect, rm)", args[0])}
	}
	return 0, nil
}

// cmdCell is `cellvm cell SANDBOX -c CODE`.
func cmdCell(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("cell", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	code := fs.String("c", "", "Python code (or give a FILE, or - for stdin)")
	timeout := fs.Duration("timeout", 60*time.Second, "cell timeout")
	outDir := fs.String("out-dir", ".", "where images are saved")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return 2, usageError{fmt.Errorf("usage: cellvm cell SANDBOX -c CODE")}
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2, usageError{err}
	}
	src, err := codeArg(*code, fs.Args(), stdin)
	if err != nil {
		return 2, usageError{err}
	}
	c, err := b.remoteOnly()
	if err != nil {
		return 1, err
	}
	defer c.Close()
	res, err := c.RunCell(context.Background(), id, src, *timeout, nil)
	if err != nil {
		return 1, err
	}
	if *b.jsonOut {
		printJSON(stdout, res)
		if res.Status != "ok" {
			return 1, nil
		}
		return 0, nil
	}
	return printResult(res, stdout, stderr, *outDir), nil
}

// cmdExec is `cellvm exec SANDBOX -- ARGV...`.
func cmdExec(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "command timeout")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return 2, usageError{fmt.Errorf("usage: cellvm exec SANDBOX [flags] -- ARGV...")}
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2, usageError{err}
	}
	if fs.NArg() == 0 {
		return 2, usageError{fmt.Errorf("usage: cellvm exec SANDBOX [flags] -- ARGV...")}
	}
	c, err := b.remoteOnly()
	if err != nil {
		return 1, err
	}
	defer c.Close()
	r, err := c.Exec(context.Background(), id, sandbox.ExecRequest{Argv: fs.Args(), Timeout: *timeout})
	if err != nil {
		return 1, err
	}
	if *b.jsonOut {
		return r.ExitCode, printJSON(stdout, r)
	}
	io.WriteString(stdout, r.Stdout)
	io.WriteString(stderr, r.Stderr)
	if r.TimedOut {
		fmt.Fprintln(stderr, "cellvm: the command timed out and was killed")
		return 124, nil
	}
	return r.ExitCode, nil
}

// cmdCp is `cellvm cp SRC DST` where one side is SANDBOX:/path.
func cmdCp(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("cp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2, usageError{err}
	}
	if fs.NArg() != 2 {
		return 2, usageError{fmt.Errorf("usage: cellvm cp LOCAL SANDBOX:/path | cellvm cp SANDBOX:/path LOCAL")}
	}
	src, dst := fs.Arg(0), fs.Arg(1)
	sbSrc, pSrc, srcRemote := splitRemote(src)
	sbDst, pDst, dstRemote := splitRemote(dst)
	if srcRemote == dstRemote {
		return 2, usageError{fmt.Errorf("exactly one of SRC and DST must be SANDBOX:/path")}
	}
	c, err := b.remoteOnly()
	if err != nil {
		return 1, err
	}
	defer c.Close()
	ctx := context.Background()
	if dstRemote {
		f, err := os.Open(src)
		if err != nil {
			return 1, err
		}
		defer f.Close()
		n, err := c.Upload(ctx, sbDst, pDst, f)
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stderr, "copied %d bytes to %s:%s\n", n, sbDst, pDst)
		return 0, nil
	}
	tmp := dst + ".cellvm-partial"
	f, err := os.Create(tmp)
	if err != nil {
		return 1, err
	}
	n, err := c.Download(ctx, sbSrc, pSrc, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return 1, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return 1, err
	}
	fmt.Fprintf(stderr, "copied %d bytes from %s:%s\n", n, sbSrc, pSrc)
	return 0, nil
}

// splitRemote splits "sb-123:/path" into its parts.
func splitRemote(s string) (id, path string, ok bool) {
	id, path, found := strings.Cut(s, ":")
	if !found || !strings.HasPrefix(id, "sb-") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, path, true
}
