package interp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/drop"
)

// TestLauncherRunsCellsAndCommandsAsTheCellUser starts the interpreter and
// commands through the drop step, as the guest agent does: the cell and
// the command run as the unprivileged user, a missing program is still
// exit code 127, and the interpreter still answers after a restart.
func TestLauncherRunsCellsAndCommandsAsTheCellUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change user")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	work := filepath.Join(base, "workspace")
	os.Mkdir(work, 0o755)
	os.Chown(work, 1000, 1000)
	in := newTestInterp(t, func(c *Config) {
		c.Dir = work
		c.Launcher = drop.Spec{UID: 1000, GID: 1000}.Command(os.Args[0], nil)
		c.Env = append(os.Environ(), "HOME="+work)
	})
	res := run(t, in, "import os\nopen('mine.txt', 'w').write('x')\n(os.getuid(), os.getgid(), os.getgroups())")
	expectOK(t, res)
	if got := mainText(t, res); got != "(1000, 1000, [])" {
		t.Errorf("cell credentials %s, want (1000, 1000, [])", got)
	}
	// A shell escape runs as the cell user too, in the cell's process tree.
	res = run(t, in, "!id -u; test -O mine.txt && echo owner")
	if res.Status != cell.StatusOK || res.Stdout != "1000\nowner\n" {
		t.Errorf("shell escape through the launcher: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x, err := in.Exec(ctx, []string{"sh", "-c", "id -u; stat -c %u mine.txt; cat /proc/self/status | grep NoNewPrivs"}, nil, time.Minute)
	if err != nil || x.ExitCode != 0 || x.Stdout != "1000\n1000\nNoNewPrivs:\t1\n" {
		t.Errorf("command through the launcher: %+v, %v", x, err)
	}
	x, err = in.Exec(ctx, []string{"/no/such/program"}, nil, time.Minute)
	if err != nil || x.ExitCode != 127 || !strings.Contains(x.Stderr, "/no/such/program") {
		t.Errorf("missing program through the launcher: %+v, %v", x, err)
	}
	if err := in.Restart(); err != nil {
		t.Fatal(err)
	}
	if res := run(t, in, "1 + 1"); res.Status != cell.StatusOK {
		t.Errorf("cell after a restart: %+v", res)
	}
}
