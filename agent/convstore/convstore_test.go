package convstore

import (
	"os"
	"testing"

	"github.com/cellvm/cellvm/agent"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	s := Store{Dir: t.TempDir() + "/conv"}
	if _, found, err := s.Load("c1"); found || err != nil {
		t.Fatalf("Load of a new id = found %v, %v", found, err)
	}
	c := Conversation{ID: "c1", SandboxID: "sb-1", Provider: "openai", Messages: []agent.Message{
		agent.UserText("hi"),
		{Role: agent.RoleAssistant, Parts: []agent.Part{{Type: agent.PartToolCall, Call: &agent.ToolCall{ID: "x", Name: "run_python", Args: []byte(`{"code":"1"}`)}}}},
		{Role: agent.RoleUser, Parts: []agent.Part{{Type: agent.PartToolResult, Result: &agent.ToolResult{CallID: "x", Text: "1", Images: []agent.Image{{MIME: "image/png", Data: []byte{1, 2}}}}}}},
	}}
	if err := s.Save(c); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.Load("c1")
	if err != nil || !found {
		t.Fatalf("Load = %v, %v", found, err)
	}
	if got.SandboxID != "sb-1" || len(got.Messages) != 3 || got.Messages[1].Calls()[0].ID != "x" ||
		string(got.Messages[2].Parts[0].Result.Images[0].Data) != "\x01\x02" {
		t.Errorf("round trip lost data: %+v", got)
	}
	st, err := os.Stat(s.path("c1"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want 0600", st.Mode(), err)
	}
}

func TestValidID(t *testing.T) {
	for _, bad := range []string{"", "../x", "a/b", ".hidden", string(make([]byte, 65))} {
		if ValidID(bad) == nil {
			t.Errorf("ValidID(%q) accepted", bad)
		}
	}
	for _, good := range []string{"a", "proj-1.run_2"} {
		if err := ValidID(good); err != nil {
			t.Errorf("ValidID(%q) = %v", good, err)
		}
	}
}
