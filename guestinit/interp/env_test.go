package interp

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// TestSetEnvReachesCellsAndCommands: the variables of SetEnv are in the
// environment of the interpreter and of commands, override the configured
// ones, cannot override what the driver relies on, and reach an
// interpreter that was already running (it is started afresh).
func TestSetEnvReachesCellsAndCommands(t *testing.T) {
	in := newTestInterp(t, func(c *Config) {
		c.Env = []string{"PATH=" + os.Getenv("PATH"), "KEEP=base", "OVER=base"}
	})
	ctx := context.Background()
	if r, err := in.Run(ctx, "before = 1", 30*time.Second, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("first cell: %+v %v", r, err)
	}
	if err := in.SetEnv(map[string]string{"OVER": "mine", "NEW": "v=1 é", "MPLBACKEND": "TkAgg"}); err != nil {
		t.Fatal(err)
	}
	r, err := in.Run(ctx, "import os\nprint(os.environ['KEEP'], os.environ['OVER'], os.environ['NEW'], os.environ['MPLBACKEND'], 'before' in globals())", 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "base mine v=1 é Agg False\n"; r.Stdout != want {
		t.Errorf("cell after SetEnv printed %q (%+v), want %q", r.Stdout, r.Error, want)
	}
	er, err := in.Exec(ctx, []string{"sh", "-c", `echo "$KEEP $OVER $NEW"`}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := "base mine v=1 é\n"; er.Stdout != want {
		t.Errorf("command after SetEnv printed %q, want %q", er.Stdout, want)
	}

	// A second call replaces the set.
	if err := in.SetEnv(map[string]string{"OTHER": "2"}); err != nil {
		t.Fatal(err)
	}
	er, _ = in.Exec(ctx, []string{"sh", "-c", `echo "${NEW-unset} $OVER $OTHER"`}, nil, 10*time.Second)
	if want := "unset base 2\n"; er.Stdout != want {
		t.Errorf("command after the second SetEnv printed %q, want %q", er.Stdout, want)
	}
	in.Close()
	if err := in.SetEnv(map[string]string{"A": "1"}); err != ErrClosed {
		t.Errorf("SetEnv after Close: %v, want ErrClosed", err)
	}
}
