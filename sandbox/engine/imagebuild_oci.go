package engine

import (
	"context"
	"io"

	"github.com/cellvm/cellvm/image/oci"
)

// FromOCI is an image package image/oci pulled or read, as the engine's
// ImageFetcher hands it on: its layers stream within ctx (the pull's or
// import's). err passes through, so a fetcher can return
// FromOCI(ctx, oci.Pull(...)).
func FromOCI(ctx context.Context, im *oci.Image, err error) (*FetchedImage, error) {
	if err != nil {
		return nil, err
	}
	f := &FetchedImage{Ref: im.Ref, Digest: im.Digest, Config: im.Config, Close: im.Close,
		Open: func(i int) (io.ReadCloser, error) { return im.Open(ctx, i) }}
	for _, l := range im.Layers {
		f.Layers = append(f.Layers, l.Plan(""))
	}
	return f, nil
}
