package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agent/modeltest"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestChatInMicroVM runs `cellvm chat` against the fake model server (the
// OpenAI wire format): the model writes code, sees a KeyError, fixes it,
// asks for a chart and answers; every cell runs in a real microVM, and the
// chart comes back as a PNG file.
func TestChatInMicroVM(t *testing.T) {
	kvmtest.Require(t)
	fm := modeltest.New(modeltest.DefaultScript())
	srv := fm.Start()
	defer srv.Close()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// --timeout: the first pandas import alone can take a minute in the
	// rig's nested emulation on a loaded host; the loop is under test here,
	// not the speed.
	cmd := exec.CommandContext(ctx, os.Args[0], "chat", "--provider", "openai", "--timeout", "4m", "--out-dir", out, "what is the mean of b? then chart it")
	cmd.Env = append(guestEnv(t), "OPENAI_BASE_URL="+srv.URL+"/v1", "OPENAI_API_KEY=test")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cellvm chat: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, p := range modeltest.CheckDefaultTranscript(fm.Requests(), false) {
		t.Error(p)
	}
	for _, v := range fm.Violations() {
		t.Errorf("wire-format violation: %s", v)
	}
	pngs, _ := filepath.Glob(filepath.Join(out, "*.png"))
	if len(pngs) == 0 {
		t.Errorf("no PNG written to %s; stderr:\n%s", out, stderr.String())
	}
	for _, p := range pngs {
		b, _ := os.ReadFile(p)
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", p)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}
