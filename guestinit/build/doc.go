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
package build
