// Package build is the image builder that runs inside the builder
// microVM (`cellvm-init build`): it reads the host's plan and inputs from
// a read-only disk, makes the image on the out disk (a copy of the base,
// or OCI layers applied to a fresh ext4), runs the recipe's steps in a
// chroot of it, records its manifest and config, and shrinks it. See
// package image/buildplan for the protocol with the host.
//
// Why in a VM: the inputs (layers from a registry, wheels, files, shell
// commands) are a stranger's. Unpacked and run here, the worst they can
// do is to the throwaway VM; the host only checks the result disk's
// superblock. Even so, the layer applier writes nothing outside the
// image's root (Root, Applier): the VM's own tools and files stay as
// they are for the steps that follow.
//
// The contract, as root in the VM:
//
//		cellvm-init build [-inputs /dev/vdb] [-out /dev/vdc] [-work /run/cellvm-build] [-max-inputs BYTES]
//
//	  - -inputs is a tar archive: plan.json first (strict JSON, at most
//	    buildplan.MaxPlanBytes, Plan.Validate), then the small inputs (the
//	    plan's Collect and Modules files and inputs/...; copied to WORK/in,
//	    at most -max-inputs bytes, owners root, no devices), then the
//	    layers in plan order (streamed: decompressed by magic and media
//	    type, sha256-checked against Layer.Digest when it is one).
//	  - -out is a block device, or a regular file (mounted through an
//	    auto-clearing loop device). derive: e2fsck -fy, resize2fs to the
//	    device, tune2fs -U UUID. layers: mkfs.ext4 -O ^has_journal -U UUID.
//	    Mounted at WORK/root while the build runs; unmounted, checked,
//	    shrunk (resize2fs -M) at the end.
//	  - Lines on stdout, appended to WORK/progress too: "step NAME"
//	    (extract, then apt, pip, files or run per step (a config step has
//	    none), manifest, mkfs, done); any other line is output (at most
//	    4 KiB, control bytes replaced, never starting like a step line);
//	    on failure "failed: NAME" and the error's lines, last.
//	  - On success WORK/result.json (buildplan.Result, at most
//	    buildplan.MaxResultSize) and exit 0; a failed step exits 1, bad
//	    flags 2.
//
// In the image the build leaves /etc/cellvm-image.json (the config),
// /etc/cellvm-image (the marker), /etc/cellvm-manifest.json (collect.py's,
// or a minimal one naming no modules when the image has no usable
// python3), an empty /etc/resolv.conf (or the image's own link put back),
// and whatever directories its mounts needed (/proc, /dev, /tmp, /etc).
package build
