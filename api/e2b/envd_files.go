package e2b

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// /files: the SDK's files.read (GET ?path=&username=, the bytes back)
// and files.write / writeFiles (POST: multipart/form-data with a "file"
// part per file, named by its path, or one application/octet-stream
// body, optionally gzip). They map onto Manager.Download and Upload,
// whose limit on a file's size answers 413. Errors are envd's JSON,
// {"message","code"}, which the SDK reads.

// envdMaxParts bounds the files one multipart upload carries.
const envdMaxParts = 1000

// envdWritten is one written file as the SDK reads it.
type envdWritten struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func envdFiles(s scope, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	user := q.Get("username")
	if !sandbox.ValidGuestUser(user) {
		envdHTTPError(w, http.StatusBadRequest, fmt.Sprintf("username %q: a cellvm sandbox has %q and %q", clipCaller(user), sandbox.GuestUserCell, sandbox.GuestUserRoot))
		return
	}
	if user == sandbox.GuestUserRoot {
		info, err := s.m.Get(r.Context(), s.id)
		if err != nil {
			envdManagerError(s, w, err)
			return
		}
		if !info.Config.Root {
			envdHTTPError(w, http.StatusForbidden, "this sandbox was not created to let root act in it")
			return
		}
	}
	switch r.Method {
	case http.MethodGet:
		p := q.Get("path")
		if p == "" {
			envdHTTPError(w, http.StatusBadRequest, "path is missing")
			return
		}
		full, err := sandbox.GuestPath(envdPath(p, user))
		if err != nil {
			envdManagerError(s, w, err)
			return
		}
		lw := &envdLazyWriter{w: w}
		if _, err := s.m.Download(r.Context(), s.id, full, lw); err != nil {
			if lw.wrote {
				s.log.Warn("e2b: a download failed midway", "sandbox", s.id, "err", err)
				panic(http.ErrAbortHandler) // cut the response: the file is not whole
			}
			envdManagerError(s, w, err)
			return
		}
		if !lw.wrote {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
		}
	case http.MethodPost:
		envdUpload(s, w, r, q.Get("path"), user)
	default:
		envdHTTPError(w, http.StatusMethodNotAllowed, "/files takes GET or POST")
	}
}

func envdUpload(s scope, w http.ResponseWriter, r *http.Request, qpath, user string) {
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []envdWritten
	put := func(p string, body io.Reader) bool {
		if p == "" {
			envdHTTPError(w, http.StatusBadRequest, "path is missing: give ?path= or name the file part by its path")
			return false
		}
		full, err := sandbox.GuestPath(envdPath(p, user))
		if err != nil {
			envdManagerError(s, w, err)
			return false
		}
		if _, err := s.m.Upload(r.Context(), s.id, full, body); err != nil {
			envdManagerError(s, w, err)
			return false
		}
		written = append(written, envdWritten{Name: path.Base(full), Type: "file", Path: full})
		return true
	}
	switch ct {
	case "multipart/form-data":
		if params["boundary"] == "" {
			envdHTTPError(w, http.StatusBadRequest, "multipart/form-data without a boundary")
			return
		}
		mr, err := r.MultipartReader()
		if err != nil {
			envdHTTPError(w, http.StatusBadRequest, "not a multipart body: "+err.Error())
			return
		}
		for n := 0; ; n++ {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				envdHTTPError(w, http.StatusBadRequest, "reading the multipart body: "+err.Error())
				return
			}
			if n >= envdMaxParts {
				envdHTTPError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("more than %d files in one upload", envdMaxParts))
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			p := qpath
			if p == "" {
				// The part's file name is the file's path: not
				// part.FileName(), which keeps only its last element.
				_, cd, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				p = cd["filename"]
			}
			ok := put(p, part)
			part.Close()
			if !ok {
				return
			}
		}
		if len(written) == 0 {
			envdHTTPError(w, http.StatusBadRequest, `the upload has no "file" part`)
			return
		}
	case "application/octet-stream":
		var body io.Reader = r.Body
		if enc := r.Header.Get("Content-Encoding"); enc == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				envdHTTPError(w, http.StatusBadRequest, "the gzip body is not gzip: "+err.Error())
				return
			}
			defer zr.Close()
			body = zr
		} else if enc != "" && enc != "identity" {
			envdHTTPError(w, http.StatusBadRequest, fmt.Sprintf("Content-Encoding %q: use gzip or none", clipCaller(enc)))
			return
		}
		if !put(qpath, body) {
			return
		}
	default:
		envdHTTPError(w, http.StatusBadRequest, fmt.Sprintf("content type %q: use multipart/form-data or application/octet-stream", clipCaller(ct)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(written)
}

// envdLazyWriter sets the download's headers at its first byte, so an
// error before it can still be a status.
type envdLazyWriter struct {
	w     http.ResponseWriter
	wrote bool
}

func (l *envdLazyWriter) Write(b []byte) (int, error) {
	if !l.wrote {
		l.wrote = true
		l.w.Header().Set("Content-Type", "application/octet-stream")
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(b)
}

// envdManagerError answers a Manager's error with envd's status for it:
// 404 (the SDK's FileNotFoundError), 400, 403, 413, 507 is not used.
func envdManagerError(s scope, w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	msg := "internal error"
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, sandbox.ErrInvalid):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, sandbox.ErrForbidden):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, sandbox.ErrTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, sandbox.ErrBusy):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, sandbox.ErrLost):
		status, msg = http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, sandbox.ErrNotSupported):
		status, msg = http.StatusNotImplemented, err.Error()
	default:
		s.log.Error("e2b: envd file call failed", "sandbox", s.id, "err", err)
	}
	envdHTTPError(w, status, msg)
}

// envdHTTPError writes envd's error body.
func envdHTTPError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"message": strings.TrimSpace(msg), "code": status})
}
