package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// maxImageLine bounds one line of a streamed image answer: an event's
// output line, or the last line's ImageInfo or error with its tail.
const maxImageLine = 4 << 20

// CreateImage makes an image (POST /v1/images). A pull, or a recipe
// without an Archive, goes as JSON; an import, or a recipe with an
// Archive, as multipart/form-data with the Archive streamed from
// req.Archive as it is read (never held whole). With progress not nil
// the answer is streamed and progress is called for each event as it
// arrives. Errors are *Error values matching the sandbox sentinels
// (ErrUpstream, ErrBuildFailed with the step and its tail, ErrBusy for a
// taken name, ErrTooLarge, ErrInvalid, ErrQuota).
func (c *Client) CreateImage(ctx context.Context, req sandbox.ImageRequest, progress func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	wire := ImageCreateRequest{ImageRequest: req}
	wire.Archive, wire.Timeout = nil, 0
	if req.Timeout > 0 {
		wire.TimeoutS = int64((req.Timeout + time.Second - 1) / time.Second)
	}
	js, err := json.Marshal(wire)
	if err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("encoding request: %w", err)
	}
	var body io.Reader = bytes.NewReader(js)
	contentType := "application/json"
	if req.Archive != nil {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		contentType = mw.FormDataContentType()
		body = pr
		// The transport closes pr when it is done with the body (an early
		// answer included), which ends this writer's copy.
		go func() { pw.CloseWithError(writeImageParts(mw, js, req.Archive)) }()
		defer pr.Close()
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, c.base+"/v1/images", body)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	hreq.Header.Set("Content-Type", contentType)
	if req.Archive != nil {
		// A refusal (a bad request, a taken name) then costs no transfer.
		hreq.Header.Set("Expect", "100-continue")
	}
	if progress != nil {
		hreq.Header.Set("Accept", NDJSONType)
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("cellvm api create image %s: %w", req.Name, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusCreated:
		var info sandbox.ImageInfo
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseJSON)).Decode(&info); err != nil {
			return info, fmt.Errorf("cellvm api create image %s: decoding response: %w", req.Name, err)
		}
		return info, nil
	case resp.StatusCode == http.StatusOK && progress != nil:
		return readImageStream(resp.Body, progress)
	}
	return sandbox.ImageInfo{}, decodeError(resp)
}

// writeImageParts writes the multipart body: the request's JSON, then
// the archive.
func writeImageParts(mw *multipart.Writer, js []byte, archive io.Reader) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="`+ImagePartRequest+`"`)
	h.Set("Content-Type", "application/json")
	pw, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := pw.Write(js); err != nil {
		return err
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="`+ImagePartArchive+`"; filename="archive.tar"`)
	h.Set("Content-Type", "application/octet-stream")
	if pw, err = mw.CreatePart(h); err != nil {
		return err
	}
	if _, err := io.Copy(pw, archive); err != nil {
		return fmt.Errorf("reading the archive: %w", err)
	}
	return mw.Close()
}

// readImageStream reads ImageStreamLines until the image or the error.
func readImageStream(r io.Reader, progress func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxImageLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l ImageStreamLine
		if err := json.Unmarshal(line, &l); err != nil {
			return sandbox.ImageInfo{}, fmt.Errorf("cellvm api create image: bad progress line: %w", err)
		}
		switch {
		case l.Error != nil:
			l.Error.Status = statusForCode(l.Error.Code)
			return sandbox.ImageInfo{}, l.Error
		case l.Image != nil:
			return *l.Image, nil
		case l.Event != nil:
			progress(*l.Event)
		}
	}
	if err := sc.Err(); err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("cellvm api create image: reading progress: %w", err)
	}
	return sandbox.ImageInfo{}, fmt.Errorf("cellvm api create image: the stream ended without the image or an error: %w", io.ErrUnexpectedEOF)
}

// statusForCode is the HTTP status an error code goes with.
func statusForCode(code string) int {
	for _, c := range codeTable {
		if c.code == code {
			return c.status
		}
	}
	return http.StatusInternalServerError
}
