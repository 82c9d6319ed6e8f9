package cell

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestResultJSONShape(t *testing.T) {
	r := Result{Status: StatusOK, ExecutionCount: 3, StateKept: true}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"status", "execution_count", "stdout", "stderr", "results", "error", "state_kept", "killed_by", "truncated", "duration_ms"} {
		if _, ok := m[key]; !ok {
			t.Errorf("key %q missing from %s", key, b)
		}
	}
	if m["killed_by"] != nil || m["error"] != nil {
		t.Errorf("killed_by/error not null: %s", b)
	}
	if res, ok := m["results"].([]any); !ok || len(res) != 0 {
		t.Errorf("results = %v, want []", m["results"])
	}
	tr := m["truncated"].(map[string]any)
	if _, ok := tr["stdout_bytes"]; !ok {
		t.Errorf("truncated lacks stdout_bytes: %s", b)
	}
}

func TestKilledByRoundTrip(t *testing.T) {
	for _, k := range []KilledBy{KilledByNone, KilledByTimeout, KilledByOOM, KilledBySignal} {
		in := Result{Status: StatusTimeout, KilledBy: k}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out Result
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if out.KilledBy != k {
			t.Errorf("round trip of %q gave %q", k, out.KilledBy)
		}
	}
	var r Result
	if err := json.Unmarshal([]byte(`{"killed_by":"martians"}`), &r); err == nil || !strings.Contains(err.Error(), "martians") {
		t.Errorf("unknown killed_by accepted: %v", err)
	}
}

func TestEventJSON(t *testing.T) {
	b, _ := json.Marshal(Event{Type: EventStdout, Text: "hi\n"})
	if string(b) != `{"type":"stdout","text":"hi\n"}` {
		t.Errorf("stdout event = %s", b)
	}
	b, _ = json.Marshal(Event{Type: EventEnd, End: &Result{Status: StatusOK}})
	if !strings.HasPrefix(string(b), `{"type":"end","end":{"status":"ok"`) {
		t.Errorf("end event = %s", b)
	}
}
