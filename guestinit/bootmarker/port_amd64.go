package bootmarker

import "golang.org/x/sys/unix"

func ioperm(from, num int, on bool) error {
	v := 0
	if on {
		v = 1
	}
	return unix.Ioperm(from, num, v)
}

// outb writes val to I/O port port (port_amd64.s).
//
//go:noescape
func outb(port uint16, val uint8)
