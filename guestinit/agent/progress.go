package agent

import (
	"net"
	"time"
)

// progressConn gives each write to the host its own deadline, so that
// WriteTimeout bounds a stall rather than a whole message. A large
// message (a cell's result with a 60 MiB display) takes as long as the
// host takes to read it: the host holds it back on purpose while its
// result budget is full (agentclient.Budget, at most BudgetWait, well
// under WriteTimeout), and a loaded host reads it slowly but steadily.
// Neither is a dead host, which is what the timeout is for; a deadline
// set once for the whole message failed them both, and the agent then
// gave up on a cell whose result the host was about to take.
type progressConn struct {
	net.Conn
	timeout time.Duration
}

func (c progressConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}
