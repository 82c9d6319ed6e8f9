package rootfs

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// MountPoints parses /proc/self/mounts-format text and returns the mount
// points in mount order (bounded: at most 4096 lines of 4 KiB).
func MountPoints(r io.Reader) []string {
	var out []string
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	sc.Buffer(make([]byte, 4096), 4096)
	for sc.Scan() && len(out) < 4096 {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		out = append(out, unescapeMount(f[1]))
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for space) of /proc/mounts.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// UnmountAll unmounts every mount below / in reverse mount order (lazily
// when busy) and remounts / read-only, as the last step before reboot.
func UnmountAll(log *slog.Logger) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		log.Warn("shutdown: read mounts", "err", err)
		return
	}
	points := MountPoints(f)
	f.Close()
	for i := len(points) - 1; i >= 0; i-- {
		p := points[i]
		if p == "/" {
			continue
		}
		if err := unix.Unmount(p, 0); err != nil {
			if err2 := unix.Unmount(p, unix.MNT_DETACH); err2 != nil {
				log.Debug("shutdown: unmount", "path", p, "err", err2)
			}
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		log.Debug("shutdown: remount / read-only", "err", err)
	}
}
