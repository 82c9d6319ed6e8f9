package cell

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestResultJSONCheckpoint: the checkpoint fields encode as encoding/json
// encodes their omitempty tags, and are absent when unset.
func TestResultJSONCheckpoint(t *testing.T) {
	checkResult(t, "checkpoint", Result{Status: StatusOK, ExecutionCount: 2, Checkpoint: 3})
	checkResult(t, "checkpoint error", Result{Status: StatusOK, CheckpointError: "disk full <&>\u2028\xff"})
	checkResult(t, "both", Result{Checkpoint: -1, CheckpointError: "x"})
	if b, _ := json.Marshal(Result{}); strings.Contains(string(b), "checkpoint") {
		t.Errorf("an unset checkpoint is encoded: %s", b)
	}
	b, _ := json.Marshal(Result{Checkpoint: 4})
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || back.Checkpoint != 4 {
		t.Errorf("round trip of %s = %+v, %v", b, back, err)
	}
	b, _ = json.Marshal(ExecResult{Checkpoint: 5, CheckpointError: ""})
	if !strings.Contains(string(b), `"checkpoint":5`) || strings.Contains(string(b), "checkpoint_error") {
		t.Errorf("ExecResult = %s", b)
	}
}
