package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// What the image commands share: the request's common flags, the
// progress as the host-side builder printed it ("[image NAME HH:MM:SS]
// step", output lines indented), and the summary.

// imageReqFlags are the flags every image request has.
type imageReqFlags struct {
	replace bool
	timeout time.Duration
}

func addImageReqFlags(fs *pflag.FlagSet) *imageReqFlags {
	f := &imageReqFlags{}
	fs.BoolVar(&f.replace, "replace", false, "replace an image of that name (without it, a taken name is refused)")
	fs.DurationVar(&f.timeout, "timeout", sandbox.DefaultImageBuildTimeout, "the whole request's time limit (fetch and build)")
	return f
}

func (f *imageReqFlags) apply(req *sandbox.ImageRequest) error {
	if f.timeout <= 0 || f.timeout > api.MaxImageTimeout {
		return usagef("--timeout %v: want more than 0 and at most %v", f.timeout, api.MaxImageTimeout)
	}
	req.Replace, req.Timeout = f.replace, f.timeout
	return nil
}

// imageProgress prints a request's events to w.
type imageProgress struct {
	mu       sync.Mutex
	w        io.Writer
	name     string
	lastStep string
	lastPct  time.Time
}

func (p *imageProgress) event(ev sandbox.ImageEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	stamp := fmt.Sprintf("[image %s %s]", p.name, time.Now().Format("15:04:05"))
	switch {
	case ev.Message != "":
		for _, line := range strings.Split(strings.TrimRight(ev.Message, "\n"), "\n") {
			fmt.Fprintf(p.w, "  %s\n", line)
		}
	case ev.Done > 0 || ev.Total > 0:
		// Bytes fetched: at most one line every two seconds, and the last.
		if ev.Done < ev.Total && time.Since(p.lastPct) < 2*time.Second {
			return
		}
		p.lastPct = time.Now()
		if ev.Total > 0 {
			fmt.Fprintf(p.w, "%s %s %d of %d MiB\n", stamp, ev.Step, ev.Done>>20, ev.Total>>20)
		} else {
			fmt.Fprintf(p.w, "%s %s %d MiB\n", stamp, ev.Step, ev.Done>>20)
		}
	default:
		p.lastStep = ev.Step
		fmt.Fprintf(p.w, "%s %s\n", stamp, ev.Step)
	}
}

// createImage sends req with progress on stderr, Ctrl-C cancelling it
// (the daemon then stops the builder and keeps nothing), and prints the
// result.
func (a *app) createImage(ctx context.Context, c *api.Client, req sandbox.ImageRequest, what string) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	p := &imageProgress{w: a.stderr, name: req.Name}
	info, err := c.CreateImage(ctx, req, p.event)
	if err != nil {
		return fmt.Errorf("image %s: %w", req.Name, err)
	}
	if a.jsonOut {
		return printJSON(a.stdout, info)
	}
	from := info.Ref
	if info.Digest != "" {
		from += " " + shortDigest(info.Digest)
	}
	if info.Source == sandbox.ImageSourceBuild {
		from = "on " + cmpOrDash(info.Base, sandbox.DefaultImage)
	}
	fmt.Fprintf(a.stdout, "image %s %s (%s, %d MiB) in %.1f s; boot it with: cellvm sandbox create --image %s\n",
		info.Name, what, strings.TrimSpace(from), info.SizeBytes>>20, time.Since(start).Seconds(), info.Name)
	return nil
}
