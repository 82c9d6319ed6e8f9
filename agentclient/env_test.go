package agentclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// TestSetEnvReachesTheGuestsProcesses: through the agent protocol, the
// variables reach the real supervisor's cells and commands.
func TestSetEnvReachesTheGuestsProcesses(t *testing.T) {
	c := serve(t, agent.Config{Interp: realInterp(t)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.SetEnv(ctx, map[string]string{"CELLVM_TEST_GREETING": "hello from the host"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.RunCell(ctx, "import os; print(os.environ.get('CELLVM_TEST_GREETING'))", 30*time.Second, nil)
	if err != nil || r.Stdout != "hello from the host\n" {
		t.Errorf("cell: stdout %q, err %v, want the variable's value", r.Stdout, err)
	}
	er, err := c.Exec(ctx, []string{"sh", "-c", "echo $CELLVM_TEST_GREETING"}, nil, 10*time.Second)
	if err != nil || er.Stdout != "hello from the host\n" {
		t.Errorf("command: stdout %q, err %v, want the variable's value", er.Stdout, err)
	}
}

// TestSetEnvRefusedWithoutEnvSetter: an interpreter that takes no
// environment makes setenv fail with a clear error, and the connection
// stays usable.
func TestSetEnvRefusedWithoutEnvSetter(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	ctx := context.Background()
	err := c.SetEnv(ctx, map[string]string{"A": "1"})
	var pe *proto.Error
	if !errors.As(err, &pe) || pe.Code != proto.CodeBadRequest || !strings.Contains(pe.Message, "no environment") {
		t.Errorf("setenv on an interpreter without SetEnv: %v", err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("health after the refused setenv: %v", err)
	}
}
