package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/cell"
)

// jsonLines parses the JSON lines of a rig program's output (other lines,
// such as a traceback, are skipped).
func jsonLines(out string) []map[string]any {
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

// TestRigTruthIgnoredSIGINT (key proof of issue 25, one sandbox): a cell
// that ignores SIGINT and spins past a short timeout gives, in the core
// result, state_kept false and killed_by timeout; the tool loop's text
// (the Python client's and package agent's, which MCP serves) says
// "variables are gone"; the Runtime compat says "lost"; and the next cell's
// NameError agrees, both times.
func TestRigTruthIgnoredSIGINT(t *testing.T) {
	sock := realDaemon(t)
	out := runIn(t, t.TempDir(), []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")},
		10*time.Minute, python(t), filepath.Join(clientsDir(t), "testdata/rig/truth.py"))
	t.Logf("truth.py:\n%s", out)
	got := map[string]map[string]any{}
	for _, l := range jsonLines(out) {
		if c, ok := l["check"].(string); ok {
			got[c] = l
		}
	}
	core := got["core"]
	raw, _ := json.Marshal(core["raw"])
	var r cell.Result
	if err := json.Unmarshal(raw, &r); err != nil || core == nil {
		t.Fatalf("no core result (%v): %s", err, out)
	}
	if r.StateKept || r.KilledBy != cell.KilledByTimeout || r.Status != cell.StatusTimeout {
		t.Errorf("core result: status %q state_kept %v killed_by %q; want timeout, false, timeout", r.Status, r.StateKept, r.KilledBy)
	}
	if text, _ := core["tool_text"].(string); !strings.Contains(text, "variables are gone") {
		t.Errorf("the Python client's tool text: %q; want \"variables are gone\"", text)
	}
	if text := agent.FormatCell(r, agent.FormatOptions{}).Text; !strings.Contains(text, "variables are gone") {
		t.Errorf("package agent's text (the tool loop's and MCP's): %q; want \"variables are gone\"", text)
	}
	if l := got["core_next"]; l["error"] != "NameError" {
		t.Errorf("the cell after the kill: %v; want a NameError", l)
	}
	if l := got["runtime"]; l["status"] != "lost" || l["state_kept"] != false || l["killed_by"] != "timeout" {
		t.Errorf("Runtime compat: %v; want status lost, state_kept false, killed_by timeout", l)
	}
	if l := got["runtime_next"]; l["error"] != "NameError" {
		t.Errorf("Runtime compat, the next cell: %v; want a NameError", l)
	}
}

// TestRigTruthUnderLoad (extended tier): a data analyst's conversation
// through the Runtime compat, 5 times while every CPU of the host (L1)
// spins; after every timeout the result's word on the variables must match
// what the next cell finds.
func TestRigTruthUnderLoad(t *testing.T) {
	sock := realDaemon(t)
	py := python(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := uint64(1); ctx.Err() == nil; x++ {
				for i := 0; i < 1<<20; i++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
		}()
	}
	out := runIn(t, t.TempDir(), []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")},
		40*time.Minute, py, filepath.Join(clientsDir(t), "testdata/rig/truth_conversation.py"), "5")
	cancel()
	wg.Wait()
	t.Logf("truth_conversation.py:\n%s", out)
	checkTruthfulConversation(t, jsonLines(out), 5)
}

// checkTruthfulConversation checks the lines of truth_conversation.py: a
// slow cell is a kept "timeout" or a "lost" (never a timeout that did not
// keep the state); the cell that ignores SIGINT is "lost" by timeout; and
// each after_* cell finds the variables exactly when nothing before it in
// its round said they were lost.
func checkTruthfulConversation(t *testing.T, lines []map[string]any, rounds int) {
	t.Helper()
	seen := 0
	lost := map[float64]bool{}
	for _, l := range lines {
		rnd, _ := l["round"].(float64)
		name, _ := l["cell"].(string)
		status, _ := l["status"].(string)
		kept, _ := l["state_kept"].(bool)
		seen++
		switch {
		case strings.HasPrefix(name, "after_"):
			if lost[rnd] && l["error"] != "NameError" {
				t.Errorf("round %v %s: %v; an earlier result said the variables were lost, yet they are there", rnd, name, l)
			}
			if !lost[rnd] && status != "ok" {
				t.Errorf("round %v %s: %v; every earlier result said the variables were kept (the lie of issue 25)", rnd, name, l)
			}
		case name == "ignores":
			if status != "lost" || kept || l["killed_by"] != "timeout" {
				t.Errorf("round %v: the cell that ignores SIGINT: %v; want lost, killed by timeout", rnd, l)
			}
		case strings.HasPrefix(name, "slow_"):
			if status == "timeout" && !kept {
				t.Errorf("round %v %s: status timeout with state_kept false: the compat told a lie", rnd, name)
			}
			if status != "timeout" && status != "lost" && !lost[rnd] {
				t.Errorf("round %v %s: %v; want a timeout (kept) or lost", rnd, name, l)
			}
		}
		if status == "lost" || !kept {
			lost[rnd] = true
		}
	}
	if want := rounds * 8; seen != want {
		t.Errorf("%d cells reported, want %d", seen, want)
	}
}
