package engine

import (
	"context"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
	"github.com/cellvm/cellvm/vmm/control"
)

// The engine as the template builder's host (templateHost in template.go).

func (m *VMManager) templateInputs(image string) ([]string, error) {
	root, err := m.imagePath("", image)
	if err != nil {
		return nil, err
	}
	return []string{m.opt.Exe, m.opt.Kernel, m.opt.Initrd, root}, nil
}

func (m *VMManager) bootTemplateVM(ctx context.Context, cfg sandbox.Config) (templateVM, error) {
	s, err := m.launch(ctx, cfg, egress.Policy{}, nil, &internalLaunch{dir: m.templates.buildDir, priority: true})
	if err != nil {
		return nil, err
	}
	return &internalVM{m: m, s: s}, nil
}

// internalVM is a VM of the engine's own, not a caller's sandbox.
type internalVM struct {
	m *VMManager
	s *vmSandbox
}

func (v *internalVM) bootMS() int64 { return v.s.bootMS.Load() }

func (v *internalVM) runCell(ctx context.Context, code string, timeout time.Duration) (cell.Result, error) {
	return v.s.agent.RunCell(ctx, code, timeout, nil)
}

func (v *internalVM) snapshot(ctx context.Context, dir string) error {
	return v.m.takeSnapshot(ctx, v.s, dir, control.ThenResume)
}

func (v *internalVM) destroy() { v.m.destroy(v.s) }
