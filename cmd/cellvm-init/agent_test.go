package main

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/guestinit/pid1"
)

// TestAgentMainServesAndShutsDown runs the agent process's main on a Unix
// socket and drives it with the host client: health, a command, and the
// shutdown request, which must end it with ExitShutdown (PID 1's cue).
func TestAgentMainServesAndShutsDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	code := make(chan int, 1)
	go func() { code <- agentMain([]string{"-listen", "unix:" + sock, "-dir", t.TempDir()}) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := c.Health(ctx); err != nil || h.Agent != "cellvm-init" {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	res, err := c.Exec(ctx, []string{"/bin/echo", "hi"}, nil, 5*time.Second)
	if err != nil || res.Stdout != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-code:
		if got != pid1.ExitShutdown {
			t.Fatalf("agentMain returned %d, want %d", got, pid1.ExitShutdown)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agentMain did not return after shutdown")
	}
}
