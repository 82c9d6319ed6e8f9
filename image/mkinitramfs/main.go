// Command mkinitramfs writes the initramfs cellvm boots its sandboxes with:
// the static cellvm-init as /init, /dev/console, and the empty directories
// init mounts on. Everything else the guest runs comes from the root image.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cellvm/cellvm/image/initramfs"
)

func main() {
	init := flag.String("init", "build/bin/cellvm-init", "the static init binary")
	out := flag.String("o", "build/initramfs.cpio", "output archive")
	flag.Parse()
	entries := []initramfs.Entry{
		{Path: "init", Mode: 0o755, HostPath: *init},
		{Path: "dev/console", CharDev: &[2]uint64{5, 1}},
	}
	for _, d := range []string{"proc", "sys", "run", "tmp", "mnt", "newroot"} {
		entries = append(entries, initramfs.Entry{Path: d, Dir: true})
	}
	if err := initramfs.WriteFile(*out, entries); err != nil {
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
	fi, _ := os.Stat(*out)
	fmt.Printf("mkinitramfs: %s (%d KiB)\n", *out, fi.Size()>>10)
}
