package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// The builder VM: booted cold from the default image (its tools), as
// root, with the inputs disk and the out disk; the host runs the guest's
// builder in it through the agent and reads its progress file every
// progressEvery while it runs.

const (
	progressEvery = 2 * time.Second
	// maxProgressBytes bounds the progress file the host reads; past
	// it, the host stops following it (the build goes on).
	maxProgressBytes = 4 << 20
	// maxEventsPerPoll and maxEventLine bound the output lines passed on.
	maxEventsPerPoll = 64
	maxEventLine     = 512
	tailLines        = 20
	maxTailBytes     = 4 << 10
)

var builderArgv = []string{"/proc/1/exe", buildplan.BuildArg}

// knownSteps are the step names the guest may report.
var knownSteps = map[string]bool{
	sandbox.ImageStepExtract: true, sandbox.ImageStepApt: true, sandbox.ImageStepPip: true, sandbox.ImageStepFiles: true,
	sandbox.ImageStepRun: true, sandbox.ImageStepManifest: true, sandbox.ImageStepMkfs: true,
}

// runBuilder boots the builder VM on the two disks, runs the build and
// returns its result; the VM is gone when it returns.
func (b *imageBuild) runBuilder(ctx context.Context, plan *buildplan.Plan, inputs, out string) (*buildplan.Result, error) {
	m := b.m
	policy, err := buildPolicy(plan.Steps)
	if err != nil {
		return nil, err
	}
	if !policy.Empty() && m.opt.Net == nil {
		return nil, fmt.Errorf("%w: image %s: its steps need the network (%s), and this daemon enforces no network policies (run it as root with --network)",
			sandbox.ErrNotSupported, b.req.Name, strings.Join(policy.Entries(), ", "))
	}
	inF, err := os.Open(inputs)
	if err != nil {
		return nil, err
	}
	defer inF.Close()
	outF, err := os.OpenFile(out, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer outF.Close()
	cfg := sandbox.Config{VCPUs: b.opt.VCPUs, MemoryMiB: b.opt.MemoryMiB, Root: true, Tenant: b.tenant, Start: sandbox.StartCold}
	b.event(sandbox.ImageEvent{Step: sandbox.ImageStepBoot})
	s, err := m.launch(ctx, cfg, policy, nil, &internalLaunch{
		dir: m.imageBuildVMDir,
		disks: []extraDisk{
			{name: "image build inputs", file: inF, readOnly: true},
			{name: "image build out disk", file: outF},
		},
		fsize: uint64(plan.DiskBytes),
	})
	if err != nil {
		return nil, &sandbox.ImageStepError{Step: sandbox.ImageStepBoot, Err: fmt.Errorf("image %s: the builder VM: %w", b.req.Name, err)}
	}
	defer m.destroy(s)
	m.log.Info("image builder VM up", "image", b.req.Name, "vm", s.id, "boot_ms", s.bootMS.Load(), "network", policy.Entries())
	return b.build(ctx, s.agent)
}

// build runs the guest's builder through agent and reads its result.
func (b *imageBuild) build(ctx context.Context, agent *agentclient.Client) (*buildplan.Result, error) {
	timeout := time.Until(b.deadline)
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	pr := &progressReader{b: b, step: sandbox.ImageStepBoot}
	callCtx, cancel := context.WithTimeout(ctx, timeout+b.m.opt.CallGrace)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				pr.poll(callCtx, agent)
			}
		}
	}()
	res, err := agent.Exec(callCtx, builderArgv, nil, timeout)
	close(stop)
	wg.Wait()
	// What the builder wrote last.
	pollCtx, pollCancel := context.WithTimeout(context.Background(), 10*time.Second)
	pr.poll(pollCtx, agent)
	pollCancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, &sandbox.ImageStepError{Step: pr.step, Tail: pr.tail(), Err: ctx.Err()}
	case err != nil && callCtx.Err() != nil || err == nil && res.TimedOut:
		return nil, &sandbox.ImageStepError{Step: pr.step, Tail: pr.tail(),
			Err: fmt.Errorf("%w: the builder did not finish by the request's deadline (%v from its start)", sandbox.ErrBuildFailed, time.Since(b.start).Round(time.Second))}
	case err != nil:
		return nil, &sandbox.ImageStepError{Step: pr.step, Tail: pr.tail(), Err: fmt.Errorf("%w: running the builder: %v", sandbox.ErrBuildFailed, err)}
	case res.ExitCode != 0:
		step := pr.failed
		if step == "" {
			step = pr.step
		}
		tail := pr.tail()
		if tail == "" {
			tail = tailOf(res.Stdout + "\n" + res.Stderr)
		}
		return nil, &sandbox.ImageStepError{Step: step, Tail: tail, Err: fmt.Errorf("%w: the builder exited with status %d", sandbox.ErrBuildFailed, res.ExitCode)}
	}
	var buf bytes.Buffer
	if _, err := agent.Download(ctx, b.opt.resultFile, &buf, buildplan.MaxResultSize); err != nil {
		return nil, &sandbox.ImageStepError{Step: sandbox.ImageStepInstall, Err: fmt.Errorf("%w: reading the builder's result: %v", sandbox.ErrBuildFailed, err)}
	}
	r, err := decodeResult(buf.Bytes())
	if err != nil {
		return nil, &sandbox.ImageStepError{Step: sandbox.ImageStepInstall, Err: fmt.Errorf("%w: the builder's result: %v", sandbox.ErrBuildFailed, err)}
	}
	return r, nil
}

// decodeResult decodes the builder's result strictly: one JSON object of
// Result's fields, nothing else.
func decodeResult(b []byte) (*buildplan.Result, error) {
	if len(b) > buildplan.MaxResultSize {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), buildplan.MaxResultSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r buildplan.Result
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return &r, nil
}

// progressReader follows the guest's progress file: "step NAME" lines
// are steps, "failed: NAME" the failed step, anything else output.
type progressReader struct {
	b      *imageBuild
	seen   int // bytes of the file handled
	off    bool
	step   string
	failed string
	lines  []string // the last output lines, for an error's tail
}

func (pr *progressReader) poll(ctx context.Context, agent *agentclient.Client) {
	if pr.off {
		return
	}
	var buf bytes.Buffer
	if _, err := agent.Download(ctx, pr.b.opt.progressFile, &buf, maxProgressBytes); err != nil {
		if errors.Is(err, agentclient.ErrTooLarge) || errors.Is(err, agentclient.ErrProtocol) {
			pr.off = true
			pr.b.m.log.Info("image build: no longer following the builder's progress", "image", pr.b.req.Name, "reason", err)
		}
		return
	}
	data := buf.Bytes()
	if len(data) < pr.seen {
		return // not the file it was: nothing to trust of it
	}
	data = data[pr.seen:]
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return
	}
	pr.seen += end + 1
	events := 0
	skipped := 0
	for _, raw := range strings.Split(string(data[:end]), "\n") {
		line := cleanLine(raw)
		switch {
		case strings.HasPrefix(line, buildplan.StepPrefix) && knownSteps[strings.TrimPrefix(line, buildplan.StepPrefix)]:
			pr.step = strings.TrimPrefix(line, buildplan.StepPrefix)
			pr.b.event(sandbox.ImageEvent{Step: pr.step})
			continue
		case strings.HasPrefix(line, buildplan.FailedPrefix) && knownSteps[strings.TrimPrefix(line, buildplan.FailedPrefix)]:
			pr.failed = strings.TrimPrefix(line, buildplan.FailedPrefix)
			continue
		}
		pr.lines = append(pr.lines, line)
		if len(pr.lines) > tailLines {
			pr.lines = pr.lines[len(pr.lines)-tailLines:]
		}
		if events < maxEventsPerPoll {
			events++
			pr.b.event(sandbox.ImageEvent{Step: pr.step, Message: line})
		} else {
			skipped++
		}
	}
	if skipped > 0 {
		pr.b.event(sandbox.ImageEvent{Step: pr.step, Message: fmt.Sprintf("(%d more lines)", skipped)})
	}
}

func (pr *progressReader) tail() string { return boundTail(strings.Join(pr.lines, "\n")) }

// cleanLine makes a line of the guest's output fit to show: valid UTF-8,
// no control characters but tabs, at most maxEventLine bytes.
func cleanLine(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > maxEventLine {
		cut := maxEventLine
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// tailOf is the last lines of s, cleaned and bounded.
func tailOf(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	for i, l := range lines {
		lines[i] = cleanLine(l)
	}
	return boundTail(strings.Join(lines, "\n"))
}

func boundTail(s string) string {
	if len(s) <= maxTailBytes {
		return s
	}
	s = s[len(s)-maxTailBytes:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
