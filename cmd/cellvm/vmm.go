package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellvm/cellvm/vmm"
)

// VMMConfig is what the daemon hands a `cellvm vmm` process: one machine.
// It travels as a JSON file so that nothing about the VM depends on the
// daemon's memory once the process runs.
type VMMConfig struct {
	Kernel    string     `json:"kernel"`
	Initrd    string     `json:"initrd,omitempty"`
	Cmdline   string     `json:"cmdline,omitempty"`
	VCPUs     int        `json:"vcpus"`
	MemoryMiB uint64     `json:"memory_mib"`
	Disks     []vmm.Disk `json:"disks,omitempty"`
	Vsock     *vmm.Vsock `json:"vsock,omitempty"`
	TAP       string     `json:"tap,omitempty"`
	MAC       [6]byte    `json:"mac,omitempty"`
	LogLevel  string     `json:"log_level,omitempty"`
}

// cmdVMM runs one VM in this process until the guest ends or the process
// gets SIGTERM/SIGINT. The console goes to stdout, the VMM's log to stderr.
func cmdVMM(args []string, stdout, stderr io.Writer) error {
	if len(args) != 2 || args[0] != "--config" {
		return usageError{fmt.Errorf("usage: cellvm vmm --config FILE")}
	}
	b, err := os.ReadFile(args[1])
	if err != nil {
		return fmt.Errorf("read vmm config: %w", err)
	}
	var c VMMConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("parse vmm config %s: %w", args[1], err)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	log, err := newLogger(stderr, c.LogLevel)
	if err != nil {
		return err
	}
	m, err := vmm.New(vmm.Config{
		Kernel: c.Kernel, Initrd: c.Initrd, Cmdline: c.Cmdline, VCPUs: c.VCPUs, MemoryMiB: c.MemoryMiB,
		Console: stdout, Log: log, Disks: c.Disks, Vsock: c.Vsock, TAP: c.TAP, MAC: c.MAC,
	})
	if err != nil {
		return err
	}
	defer m.Close()
	defer dumpVCPUsOnSIGUSR1(m)()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		if s, ok := <-sigs; ok {
			log.Info("stopping on signal", "signal", s.String())
			m.Stop()
		}
	}()
	return m.Run()
}
