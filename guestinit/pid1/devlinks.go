package pid1

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
)

// devFDLinks are the links every Linux system has in /dev (udev or
// systemd makes them; devtmpfs does not): Bash's process substitution
// `<(cmd)` opens /dev/fd/N, which the Bash cells' driver and users' cells
// rely on, and scripts read /dev/stdin.
var devFDLinks = [][2]string{
	{"/proc/self/fd", "/dev/fd"},
	{"/proc/self/fd/0", "/dev/stdin"},
	{"/proc/self/fd/1", "/dev/stdout"},
	{"/proc/self/fd/2", "/dev/stderr"},
}

// devLinks makes devFDLinks where they are missing.
func devLinks(log *slog.Logger) {
	for _, l := range devFDLinks {
		if err := os.Symlink(l[0], l[1]); err != nil && !errors.Is(err, fs.ErrExist) {
			log.Warn("link in /dev", "link", l[1], "err", err)
		}
	}
}
