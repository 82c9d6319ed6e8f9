package api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// UploadResponse is the body answering a file upload.
type UploadResponse struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// upload: PUT /v1/sandboxes/{id}/files/{path...} with the raw file as the
// body, streamed to the manager. A declared Content-Length over the limit
// is refused before anything is written; an undeclared length is cut at the
// limit and answered with 413.
func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	guestPath, err := sandbox.GuestPath(r.PathValue("path"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	if r.ContentLength > s.maxUpload {
		s.writeError(w, fmt.Errorf("%w: upload is %d bytes, at most %d", sandbox.ErrTooLarge, r.ContentLength, s.maxUpload))
		return
	}
	body := &cappedReader{r: r.Body, left: s.maxUpload}
	sum := sha256.New()
	n, err := s.m.Upload(r.Context(), r.PathValue("id"), guestPath, io.TeeReader(body, sum))
	AuditOf(r.Context()).Set(func(rec *audit.Record) {
		rec.Path, rec.Size = guestPath, n
		if err == nil && !body.exceeded {
			rec.SHA256 = hex.EncodeToString(sum.Sum(nil))
		}
	})
	if body.exceeded {
		// Whatever the manager made of the cut-off stream, the answer is
		// that it was too large.
		s.writeError(w, fmt.Errorf("%w: upload larger than %d bytes", sandbox.ErrTooLarge, s.maxUpload))
		return
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, UploadResponse{Path: guestPath, Bytes: n})
}

// errUploadTooLarge is what a cappedReader returns past its limit.
var errUploadTooLarge = fmt.Errorf("%w: upload exceeds the server's limit", sandbox.ErrTooLarge)

// cappedReader reads at most left bytes and fails with errUploadTooLarge
// (remembering it) if the stream has more.
type cappedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.exceeded {
		return 0, errUploadTooLarge
	}
	if c.left <= 0 {
		// Probe for one more byte: a body of exactly the limit is fine.
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			c.exceeded = true
			return 0, errUploadTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// download: GET /v1/sandboxes/{id}/files/{path...} answers with the raw
// file, streamed from the manager. A failure before the first byte is an
// ordinary JSON error; after it the response is cut off (the chunked body
// then lacks its terminator, which clients see as an unexpected EOF).
func (s *server) download(w http.ResponseWriter, r *http.Request) {
	guestPath, err := sandbox.GuestPath(r.PathValue("path"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	ae := AuditOf(r.Context())
	ae.Always()
	ae.Stream()
	sum := sha256.New()
	lw := &lazyWriter{w: w}
	n, err := s.m.Download(r.Context(), r.PathValue("id"), guestPath, io.MultiWriter(lw, sum))
	ae.Set(func(rec *audit.Record) {
		rec.Path, rec.Size = guestPath, n
		if err == nil {
			rec.SHA256 = hex.EncodeToString(sum.Sum(nil))
		}
	})
	if err != nil {
		if !lw.started {
			s.writeError(w, err)
			return
		}
		s.log.Warn("download failed after the response started", "sandbox", r.PathValue("id"), "path", guestPath, "err", err)
		if rec, ok := w.(*statusRecorder); ok {
			rec.errCode = "aborted"
		}
		panic(http.ErrAbortHandler)
	}
	if !lw.started {
		lw.start()
	}
}

// lazyWriter sends the 200 headers with the first byte written.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) start() {
	l.started = true
	l.w.Header().Set("Content-Type", "application/octet-stream")
	l.w.Header().Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !l.started {
		l.start()
	}
	return l.w.Write(p)
}
