package sandboxtest

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
)

// ChartPNG is the figure the "chart" cell draws: an 8x8 PNG, a blue
// line rising.
func ChartPNG() []byte {
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := 0; i < 8; i++ {
		img.Set(i, 7-i, color.RGBA{0, 0, 255, 255})
	}
	var b bytes.Buffer
	png.Encode(&b, img)
	return b.Bytes()
}
