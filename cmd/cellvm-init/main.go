// Command cellvm-init is the guest's PID 1 and, re-executed with the
// argument "agent", the guest agent that serves the host over vsock, and
// with "drop", the step that starts the interpreter and commands with the
// cells' credentials (package drop), and with "build", the image builder
// of the builder microVM (package guestinit/build).
//
// Build it static (it is the only file of the initramfs):
//
//	CGO_ENABLED=0 go build -o build/bin/cellvm-init ./cmd/cellvm-init
//
// For development the agent also runs on a host, on a Unix socket:
//
//	cellvm-init agent -listen unix:/tmp/agent.sock -python /usr/bin/python3
package main

import (
	"fmt"
	"os"

	"github.com/cellvm/cellvm/guestinit/build"
	"github.com/cellvm/cellvm/guestinit/drop"
	"github.com/cellvm/cellvm/guestinit/pid1"
	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/stwguard"
)

func main() {
	stwguard.Start()
	if os.Getpid() == 1 {
		pid1.Main() // never returns
	}
	if len(os.Args) > 1 && os.Args[1] == pid1.AgentArg {
		os.Exit(agentMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == drop.Arg {
		os.Exit(drop.Main(os.Args[2:])) // returns only on failure
	}
	if len(os.Args) > 1 && os.Args[1] == buildplan.BuildArg {
		os.Exit(build.Main(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "usage: cellvm-init is the guest's PID 1; %s agent [-listen vsock|unix:PATH] runs the agent\n", os.Args[0])
	os.Exit(2)
}
