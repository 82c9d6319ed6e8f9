package block

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// store is where the disk's bytes are: the host file, or a double in the
// package's tests. Its methods are called from several request goroutines
// at once.
type store interface {
	// readv fills bufs, in order, from offset off; a short read is an
	// error.
	readv(bufs [][]byte, off int64) error
	// writev writes bufs, in order, at offset off.
	writev(bufs [][]byte, off int64) error
	sync() error
}

// fileStore is a host file, read and written with preadv and pwritev: one
// system call for a request's pages, whatever their number, and positional,
// so requests in flight together never share a file offset. The descriptor
// stays valid while the Block owns the file: Close resets the device, which
// waits for every request, before it closes the file.
type fileStore struct {
	f  *os.File
	fd int
}

func newFileStore(f *os.File) *fileStore { return &fileStore{f: f, fd: int(f.Fd())} }

func (s *fileStore) readv(bufs [][]byte, off int64) error {
	return vectored(bufs, off, func(iov [][]byte, off int64) (int, error) { return unix.Preadv(s.fd, iov, off) })
}

func (s *fileStore) writev(bufs [][]byte, off int64) error {
	return vectored(bufs, off, func(iov [][]byte, off int64) (int, error) { return unix.Pwritev(s.fd, iov, off) })
}

func (s *fileStore) sync() error { return s.f.Sync() }

// vectored runs op until all of bufs is transferred, going on after a
// partial transfer and retrying EINTR. It consumes bufs.
func vectored(bufs [][]byte, off int64, op func([][]byte, int64) (int, error)) error {
	for len(bufs) > 0 {
		n, err := op(bufs, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		off += int64(n)
		for n > 0 {
			if n < len(bufs[0]) {
				bufs[0] = bufs[0][n:]
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}
