package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/cellvm/cellvm/vmm"
)

func cmdBoot(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("boot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kernel := fs.String("kernel", "", "ELF vmlinux or bzImage (default: the project's build/kernel/vmlinux, or $CELLVM_KERNEL)")
	initrd := fs.String("initrd", "", "initramfs to load")
	cmdline := fs.String("cmdline", "", "kernel command line (default: "+vmm.DefaultCmdline+")")
	vcpus := fs.Int("vcpus", 1, "number of vCPUs")
	memory := fs.Uint64("memory", 256, "guest memory in MiB")
	logLevel := fs.String("log-level", "info", "log level for the VMM's log on stderr")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *vcpus < 1 {
		return usageError{fmt.Errorf("--vcpus must be at least 1, got %d", *vcpus)}
	}
	if *memory == 0 {
		return usageError{fmt.Errorf("--memory must be positive")}
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if *kernel == "" {
		*kernel = os.Getenv("CELLVM_KERNEL")
	}
	if *kernel == "" {
		*kernel = findBuildFile("kernel/vmlinux")
		if *kernel == "" {
			return fmt.Errorf("no kernel: pass --kernel, set CELLVM_KERNEL, or build the project's kernel with 'make kernel'")
		}
	}
	m, err := vmm.New(vmm.Config{
		Kernel:       *kernel,
		Initrd:       *initrd,
		Cmdline:      *cmdline,
		VCPUs:        *vcpus,
		MemoryMiB:    *memory,
		Console:      stdout,
		ConsoleInput: stdin,
		Log:          log,
	})
	if err != nil {
		return err
	}
	defer m.Close()
	return m.Run()
}
