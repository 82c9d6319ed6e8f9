module github.com/cellvm/cellvm

go 1.26.8

require (
	github.com/mdlayher/vsock v1.4.0
	github.com/u-root/u-root v0.16.0
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/mdlayher/socket v0.8.0 // indirect
	github.com/pierrec/lz4/v4 v4.1.22 // indirect
	github.com/u-root/uio v0.0.0-20240224005618-d2acac8f3701 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
