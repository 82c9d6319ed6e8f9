package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/vsock"
)

// Ports the vsock test uses.
const (
	guestEchoPort = 5000 // the guest listens and echoes
	hostEchoPort  = 6000 // the host listens (at <uds>_6000) and echoes
	hostDeadPort  = 6001 // nobody listens
	vsockBulk     = 16 << 20
	vsockConns    = 64
)

// guestRole runs inside a test guest: the test binary (static, built with
// CGO_ENABLED=0 for the rig) is copied into the initramfs and started by
// its /init with CELLVM_TEST_GUEST set, so the guest side of a test is Go
// code that lives beside the host side.
func guestRole(role string) int {
	switch role {
	case "vsock":
		return guestVsock()
	}
	fmt.Println("unknown guest role", role)
	return 2
}

func echo(c net.Conn) {
	defer c.Close()
	io.Copy(c, c)
}

// pattern is deterministic test data.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// roundTrip sends data on c, half-closes, reads the echo and compares.
func roundTrip(c net.Conn, data []byte) error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			if cw, ok := c.(interface{ CloseWrite() error }); ok {
				err = cw.CloseWrite()
			}
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("write: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("echo differs: sent %d bytes (%s), got %d (%s)", len(data), sum(data)[:12], len(got), sum(got)[:12])
	}
	return nil
}

func guestVsock() int {
	ln, err := vsock.Listen(guestEchoPort, nil)
	if err != nil {
		fmt.Println("GUEST-ERROR listen:", err)
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go echo(c)
		}
	}()
	fmt.Println("GUEST-LISTENING")
	ok := true
	report := func(name string, err error) {
		if err != nil {
			ok = false
			fmt.Printf("GUEST-FAIL %s: %v\n", name, err)
		} else {
			fmt.Printf("GUEST-OK %s\n", name)
		}
	}
	// Guest to host, bulk.
	c, err := vsock.Dial(vsock.Host, hostEchoPort, nil)
	if err == nil {
		err = roundTrip(c, pattern(vsockBulk, 7))
	}
	report("guest-to-host-16MiB", err)
	// Guest to host, many at once.
	var wg sync.WaitGroup
	errs := make(chan error, vsockConns)
	for i := 0; i < vsockConns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := vsock.Dial(vsock.Host, hostEchoPort, nil)
			if err == nil {
				err = roundTrip(c, pattern(32<<10, byte(i)))
			}
			if err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	report("guest-to-host-64-conns", <-errs)
	// Nobody listens: must fail, and fast.
	start := time.Now()
	c, err = vsock.Dial(vsock.Host, hostDeadPort, nil)
	if err == nil {
		c.Close()
		report("guest-to-host-refused", fmt.Errorf("connected to a port nobody listens on"))
	} else if d := time.Since(start); d > 5*time.Second {
		report("guest-to-host-refused", fmt.Errorf("took %v to fail", d))
	} else {
		report("guest-to-host-refused", nil)
		fmt.Println("GUEST-REFUSED-MS", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
	}
	if ok {
		fmt.Println("GUEST-DONE ok")
	} else {
		fmt.Println("GUEST-DONE failed")
	}
	// Keep echoing for the host's tests until the host says stop (it
	// writes a file marker through a connection to port 5000 and then
	// ends the VM); the init reboots when we return, so block.
	select {}
}

var _ = os.Getenv
