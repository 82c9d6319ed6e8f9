package sandbox

// Ports: a TCP port a process in the guest listens on, reached from the
// host over vsock through the guest's agent (no network device needed,
// no egress rule involved). E2B's getHost(port) and `cellvm
// port-forward` are this.

// MinPort and MaxPort bound DialPort's port.
const (
	MinPort = 1
	MaxPort = 65535
)

// ErrPortClosed wraps the error of a DialPort whose port has nothing
// listening on it in the guest: front ends answer 502.
var ErrPortClosed = portClosed{}

type portClosed struct{}

func (portClosed) Error() string { return "nothing listens on that port in the sandbox" }
