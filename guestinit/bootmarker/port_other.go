//go:build !amd64

package bootmarker

import "errors"

func ioperm(from, num int, on bool) error { return errors.New("port I/O is amd64 only") }

func outb(port uint16, val uint8) {}
