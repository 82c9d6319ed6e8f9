package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// cmdRun is the main job: create a sandbox, run the code, print the
// result, destroy the sandbox.
func cmdRun(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	code := fs.String("c", "", "Python code to run (or give a FILE, or - for stdin)")
	timeout := fs.Duration("timeout", 60*time.Second, "cell timeout")
	memory := fs.Int("memory", sandbox.DefaultMemoryMiB, "guest memory in MiB")
	vcpus := fs.Int("vcpus", sandbox.DefaultVCPUs, "vCPUs")
	outDir := fs.String("out-dir", ".", "where images from the result are saved")
	if err := fs.Parse(args); err != nil {
		return 2, usageError{err}
	}
	src, err := codeArg(*code, fs.Args(), stdin)
	if err != nil {
		return 2, usageError{err}
	}
	if *timeout <= 0 {
		return 2, usageError{fmt.Errorf("--timeout must be positive")}
	}
	cfg := sandbox.Config{VCPUs: *vcpus, MemoryMiB: *memory}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return 2, usageError{err}
	}
	m, cleanup, err := b.backend(stderr)
	if err != nil {
		return 1, err
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	info, err := m.Create(ctx, cfg)
	if err != nil {
		return 1, fmt.Errorf("create sandbox: %w", err)
	}
	defer m.Delete(context.Background(), info.ID)
	res, err := m.RunCell(ctx, info.ID, src, *timeout, nil)
	if err != nil {
		return 1, fmt.Errorf("run cell: %w", err)
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

// codeArg picks the code from -c, a file argument, or stdin ("-").
func codeArg(c string, rest []string, stdin io.Reader) (string, error) {
	switch {
	case c != "" && len(rest) > 0:
		return "", fmt.Errorf("give either -c CODE or a FILE, not both")
	case c != "":
		return c, nil
	case len(rest) == 1 && rest[0] == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, sandbox.MaxCodeBytes+1))
		if err != nil {
			return "", err
		}
		return string(b), nil
	case len(rest) == 1:
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return "", err
		}
		return string(b), nil
	case len(rest) > 1:
		return "", fmt.Errorf("one FILE at most, got %d arguments", len(rest))
	}
	return "", fmt.Errorf("no code: give -c CODE, a FILE, or - for stdin")
}
