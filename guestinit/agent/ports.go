package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// Dialling a TCP port in the guest for the host (E2B's getHost, `cellvm
// port-forward`): the agent connects to 127.0.0.1:PORT, then [::1]:PORT,
// and splices the TCP connection with data frames on this connection,
// which then carries nothing else. So a server in the guest is reached
// without a network device and without any egress rule.

// DialTimeout bounds the connect to the guest's port.
const DialTimeout = 5 * time.Second

func (ss *session) dialPort(op *proto.FileOp) bool {
	port := strconv.Itoa(op.Port)
	var tcp net.Conn
	var err error
	for _, host := range []string{"127.0.0.1", "::1"} {
		tcp, err = net.DialTimeout("tcp", net.JoinHostPort(host, port), DialTimeout)
		if err == nil {
			break
		}
	}
	if err != nil {
		code := proto.CodeIO
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) {
			code = proto.CodePortClosed
		}
		return ss.reply(errResponse(code, fmt.Errorf("dial port %s: %w", port, err)))
	}
	defer tcp.Close()
	if !ss.reply(proto.Response{Files: &proto.FileReply{}}) {
		return false
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // guest -> host
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, rerr := tcp.Read(buf)
			if n > 0 {
				ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
				if err := ss.c.WriteData(buf[:n]); err != nil {
					ss.nc.Close()
					return
				}
			}
			if rerr != nil {
				ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
				var e *proto.Error
				if rerr != io.EOF {
					e = &proto.Error{Code: proto.CodeIO, Message: rerr.Error()}
				}
				if ss.c.WriteDataEnd(e) != nil {
					ss.nc.Close()
				}
				return
			}
		}
	}()
	// host -> guest, until the host's data-end or its hang-up.
	for {
		m, err := ss.c.ReadMessage()
		if err != nil {
			break
		}
		if m.Type == proto.TypeDataEnd {
			if tc, ok := tcp.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			// The host may still read; the connection ends when it
			// hangs up.
			var b [1]byte
			ss.nc.Read(b[:])
			break
		}
		if m.Type != proto.TypeData {
			break
		}
		tcp.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
		if _, err := tcp.Write(m.Payload); err != nil {
			break
		}
	}
	tcp.Close()
	ss.nc.Close()
	wg.Wait()
	return false
}
