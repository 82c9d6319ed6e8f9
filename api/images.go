package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"sync"
	"time"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// POST /v1/images makes an image (sandbox.Manager.CreateImage): a pull,
// an import, or a recipe built on a base image. Its body is either
//
//   - application/json: an ImageCreateRequest (a pull, or a recipe whose
//     steps need no files), or
//   - multipart/form-data: a part named "request" holding that JSON,
//     then a part named "archive" holding the import's archive (a docker
//     save tarball or an OCI layout tar) or the recipe's inputs (a tar
//     whose paths the steps name). The archive is streamed to the
//     manager as it arrives, never held whole, and cut at the server's
//     limit (WithMaxImageUploadBytes) with 413.
//
// Making an image takes minutes. With Accept: application/x-ndjson (or
// ?stream=1) the answer is a stream of ImageStreamLine objects, one a
// line, each flushed at once: {"event": ImageEvent} for each step and
// output line, then exactly one last line, {"image": ImageInfo} or
// {"error": Error}. A refusal before the first event is an ordinary
// JSON error with its status. Without it the answer comes at the end:
// 201 with the ImageInfo, or the error with its status.
//
// The registry token is write-only: it goes to the manager and nowhere
// else (no log line, audit record or answer holds it).

// DefaultMaxImageUploadBytes bounds an image request's archive (16 GiB).
const DefaultMaxImageUploadBytes = 16 << 30

// MaxImageTimeout bounds an image request's timeout_s.
const MaxImageTimeout = 6 * time.Hour

// WithMaxImageUploadBytes sets the largest archive POST /v1/images
// accepts (413 beyond).
func WithMaxImageUploadBytes(n int64) Option { return func(s *server) { s.maxImageUpload = n } }

// ImageCreateRequest is the JSON of POST /v1/images: the manager's
// request with its timeout in seconds (0 or absent: the manager's
// default, sandbox.DefaultImageBuildTimeout).
type ImageCreateRequest struct {
	sandbox.ImageRequest
	TimeoutS int64 `json:"timeout_s,omitempty"`
}

// ImageStreamLine is one line of a streamed POST /v1/images answer:
// exactly one field is set.
type ImageStreamLine struct {
	Event *sandbox.ImageEvent `json:"event,omitempty"`
	Image *sandbox.ImageInfo  `json:"image,omitempty"`
	Error *Error              `json:"error,omitempty"`
}

// Multipart part names of POST /v1/images.
const (
	ImagePartRequest = "request"
	ImagePartArchive = "archive"
)

func (s *server) createImage(w http.ResponseWriter, r *http.Request) {
	req, archive, err := s.readImageRequest(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ae := AuditOf(r.Context())
	ae.Set(func(rec *audit.Record) {
		rec.Image, rec.ImageSource, rec.ImageRef = req.Name, imageSource(req), req.Pull
		if req.Recipe != nil {
			rec.ImageRef = req.Recipe.Base
		}
	})
	if err := req.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	// tooLarge answers for an archive cut at the limit, whatever the
	// manager made of the cut stream.
	tooLarge := func(err error) error {
		if archive != nil && archive.exceeded {
			return fmt.Errorf("%w: the archive is larger than %d bytes (the daemon's --max-image-upload-mib)", sandbox.ErrTooLarge, s.maxImageUpload)
		}
		return err
	}
	done := func(info sandbox.ImageInfo, err error) {
		ae.Set(func(rec *audit.Record) {
			if err != nil {
				rec.ResultStatus = errorFor(err).Code
				return
			}
			rec.ResultStatus, rec.ImageDigest = "ok", info.Digest
			if rec.ImageRef == "" {
				rec.ImageRef = info.Ref
			}
		})
	}
	if !wantsStream(r) {
		info, err := s.m.CreateImage(r.Context(), req, nil)
		err = tooLarge(err)
		done(info, err)
		if err != nil {
			s.writeError(w, err)
			return
		}
		w.Header().Set("Location", "/v1/images/"+info.Name)
		s.writeJSON(w, http.StatusCreated, info)
		return
	}
	ae.Stream()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	rc := http.NewResponseController(w)
	// Progress goes out while the archive still comes in.
	_ = rc.EnableFullDuplex()
	st := &imageStream{out: ndjsonOut{w: w, rc: rc, writeTimeout: s.streamWriteTimeout}, cancel: cancel}
	info, err := s.m.CreateImage(ctx, req, func(ev sandbox.ImageEvent) { st.send(ImageStreamLine{Event: &ev}) })
	err = tooLarge(err)
	done(info, err)
	if err != nil && !st.hasStarted() {
		st.close()
		s.writeError(w, err)
		return
	}
	last := ImageStreamLine{Image: &info}
	if err != nil {
		e := errorFor(err)
		if se := (*Error)(nil); errors.As(err, &se) {
			e = se
		}
		last = ImageStreamLine{Error: e}
		ae.Set(func(rec *audit.Record) { rec.Error, rec.Reason = e.Code, e.Message })
		if e.Status >= 500 {
			s.log.Error("image failed after its stream began", "image", req.Name, "err", err)
		}
	}
	ae.Commit()
	st.send(last)
	st.close()
}

func imageSource(req sandbox.ImageRequest) string {
	switch {
	case req.Pull != "":
		return sandbox.ImageSourcePull
	case req.Import:
		return sandbox.ImageSourceImport
	case req.Recipe != nil:
		return sandbox.ImageSourceBuild
	}
	return ""
}

// readImageRequest decodes the JSON or multipart body. The returned
// archive reader, when not nil, is the request's Archive.
func (s *server) readImageRequest(w http.ResponseWriter, r *http.Request) (sandbox.ImageRequest, *cappedReader, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil && r.Header.Get("Content-Type") != "" {
		return sandbox.ImageRequest{}, nil, fmt.Errorf("%w: Content-Type %q: %v", sandbox.ErrInvalid, clipString(r.Header.Get("Content-Type"), 64), err)
	}
	var wire ImageCreateRequest
	switch mt {
	case "", "application/json":
		if err := decodeJSON(w, r, s.maxJSON, &wire, false); err != nil {
			return sandbox.ImageRequest{}, nil, err
		}
		req, err := wire.request()
		return req, nil, err
	case "multipart/form-data":
	default:
		return sandbox.ImageRequest{}, nil, fmt.Errorf("%w: Content-Type %s: want application/json, or multipart/form-data with the parts %q and %q",
			sandbox.ErrInvalid, clipString(mt, 64), ImagePartRequest, ImagePartArchive)
	}
	if r.ContentLength > s.maxImageUpload+s.maxJSON {
		return sandbox.ImageRequest{}, nil, fmt.Errorf("%w: the request is %d bytes, at most %d", sandbox.ErrTooLarge, r.ContentLength, s.maxImageUpload+s.maxJSON)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return sandbox.ImageRequest{}, nil, fmt.Errorf("%w: multipart body: %v", sandbox.ErrInvalid, err)
	}
	p, err := mr.NextPart()
	if err != nil || p.FormName() != ImagePartRequest {
		return sandbox.ImageRequest{}, nil, fmt.Errorf("%w: a multipart image request begins with the part %q (its JSON), then %q", sandbox.ErrInvalid, ImagePartRequest, ImagePartArchive)
	}
	if err := decodeJSONFrom(p, s.maxJSON, &wire); err != nil {
		return sandbox.ImageRequest{}, nil, err
	}
	req, err := wire.request()
	if err != nil {
		return req, nil, err
	}
	p, err = mr.NextPart()
	switch {
	case errors.Is(err, io.EOF):
		return req, nil, nil // a recipe that needs no files
	case err != nil:
		return req, nil, fmt.Errorf("%w: multipart body: %v", sandbox.ErrInvalid, err)
	case p.FormName() != ImagePartArchive:
		return req, nil, fmt.Errorf("%w: multipart part %q: after %q comes only %q", sandbox.ErrInvalid, clipString(p.FormName(), 64), ImagePartRequest, ImagePartArchive)
	}
	archive := &cappedReader{r: p, left: s.maxImageUpload}
	req.Archive = archive
	return req, archive, nil
}

// request is the manager's request the wire form asks for.
func (wire ImageCreateRequest) request() (sandbox.ImageRequest, error) {
	req := wire.ImageRequest
	if wire.TimeoutS < 0 || time.Duration(wire.TimeoutS)*time.Second > MaxImageTimeout {
		return req, fmt.Errorf("%w: timeout_s %d out of range 1..%d (omit it for the default %d)",
			sandbox.ErrInvalid, wire.TimeoutS, int64(MaxImageTimeout/time.Second), int64(sandbox.DefaultImageBuildTimeout/time.Second))
	}
	req.Timeout = time.Duration(wire.TimeoutS) * time.Second
	return req, nil
}

// decodeJSONFrom reads one JSON value of at most limit bytes from a
// multipart part, as decodeJSON does from a body.
func decodeJSONFrom(p *multipart.Part, limit int64, v any) error {
	body, err := io.ReadAll(io.LimitReader(p, limit+1))
	if err != nil {
		return fmt.Errorf("%w: reading the part %q: %v", sandbox.ErrInvalid, p.FormName(), err)
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("%w: the part %q is larger than %d bytes", sandbox.ErrTooLarge, p.FormName(), limit)
	}
	return decodeStrict(body, v)
}

// imageStream writes ImageStreamLines, each flushed at once. After a
// failed write it drops the rest and cancels the request. The mutex
// keeps a manager calling progress late (or from two goroutines) off
// the response writer once the handler is done with it.
type imageStream struct {
	mu     sync.Mutex
	out    ndjsonOut
	cancel context.CancelFunc
	failed bool
	closed bool
}

func (st *imageStream) hasStarted() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.out.started
}

func (st *imageStream) close() {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
}

func (st *imageStream) send(line ImageStreamLine) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.failed || st.closed {
		return
	}
	if !st.out.line(line) {
		st.fail()
	}
}

func (st *imageStream) fail() {
	st.failed = true
	st.cancel()
}
