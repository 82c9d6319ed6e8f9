package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The starts bench's breakdown of a start (issue 28: where a missed
// goal's time goes), from what the engine and the VMM log: the engine's
// "sandbox created" line's steps (prepare, spawn, agent, renew: see
// sandbox/engine's startSteps) and the VMM's "vmm built" line
// (since_exec_ms, jail_enter_ms, build_ms), read from the VMM's own log.

// stepOrder is the order a breakdown is printed in: the engine's steps,
// with the VMM's part of "agent" after it, then the first cell.
var stepOrder = []string{"prepare", "spawn", "agent", "since_exec", "jail_enter", "build",
	// build's parts: the machine (and its setup's steps, from the "vm
	// starting" line), the control socket, Run's set-up, the privileges'
	// drop and the seccomp filter.
	"machine", "kvm", "memory", "kernel", "devices", "boot", "vcpus", "control", "run", "drop", "seccomp",
	"renew", "cell"}

// createdSteps keeps each sandbox's "steps" from the managers' logs.
var createdSteps = &stepsHandler{steps: map[string]string{}}

// stepsHandler is a slog.Handler that keeps the steps of each "sandbox
// created" line and drops everything else.
type stepsHandler struct {
	mu    sync.Mutex
	steps map[string]string
}

func (h *stepsHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *stepsHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *stepsHandler) WithGroup(string) slog.Handler                { return h }

func (h *stepsHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "sandbox created" {
		return nil
	}
	var id, steps string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "id":
			id = a.Value.String()
		case "steps":
			steps = a.Value.Resolve().String()
		}
		return true
	})
	if id != "" {
		h.mu.Lock()
		h.steps[id] = steps
		h.mu.Unlock()
	}
	return nil
}

// msFields are a log line's name=N or name_ms=N fields, in milliseconds.
// A value may have a fraction and a unit ("kernel=12.5ms", the "vm
// starting" line's setup); it is read as whole milliseconds.
var msFields = regexp.MustCompile(`\b([a-z_]+?)(?:_ms)?=(-?[0-9]+)(?:\.[0-9]+)?(?:ms)?\b`)

// setupField is the "vm starting" line's setup="kvm=1.2ms ...".
var setupField = regexp.MustCompile(`\bsetup="([^"]*)"`)

// parseSteps reads name=N fields from text into ms.
func parseSteps(text string, ms map[string]int64) {
	for _, m := range msFields.FindAllStringSubmatch(text, -1) {
		if v, err := strconv.ParseInt(m[2], 10, 64); err == nil {
			ms[m[1]] = v
		}
	}
}

// startBreakdown is one start's steps in milliseconds: the engine's, the
// VMM's (from the log its stderr goes to, found through its pid), and the
// first cell's (cellMS). Steps it could not read are absent.
func startBreakdown(id string, cellMS int64) map[string]int64 {
	ms := map[string]int64{"cell": cellMS}
	createdSteps.mu.Lock()
	steps := createdSteps.steps[id]
	createdSteps.mu.Unlock()
	parseSteps(steps, ms)
	if pid, err := vmmPID(id); err == nil {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fd/2", pid)); err == nil {
			for line := range strings.Lines(string(b)) {
				switch {
				case strings.Contains(line, `msg="vmm built"`):
					parseSteps(line, ms) // the last one is this process's
				case strings.Contains(line, `msg="vm starting"`):
					// Only its setup's steps: the line's other
					// fields (vcpus=1, kernel=/kernel) are not times.
					if m := setupField.FindStringSubmatch(line); m != nil {
						parseSteps(m[1], ms)
					}
				}
			}
		}
	}
	return ms
}

// formatBreakdown prints a breakdown in stepOrder.
func formatBreakdown(ms map[string]int64) string {
	var parts []string
	for _, k := range stepOrder {
		if v, ok := ms[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
	}
	return strings.Join(parts, ", ")
}

// medianBreakdown is each step's median over starts.
func medianBreakdown(all []map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for _, k := range stepOrder {
		var vs []int64
		for _, ms := range all {
			if v, ok := ms[k]; ok {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			slices.Sort(vs)
			out[k] = vs[len(vs)/2]
		}
	}
	return out
}
