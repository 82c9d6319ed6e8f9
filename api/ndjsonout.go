package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// ndjsonOut writes a streamed answer, one JSON value a line: the headers
// with the first line, each line flushed, each write bounded by
// writeTimeout (a client that stops reading fails the stream instead of
// holding the handler). The streams (cells, images) own its locking.
type ndjsonOut struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	started      bool
}

// line writes v; false means the stream failed and should stop.
func (o *ndjsonOut) line(v any) bool {
	j, pre := preEncoded(v)
	var b []byte
	if !pre {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return false
		}
	}
	if !o.started {
		o.started = true
		o.w.Header().Set("Content-Type", NDJSONType)
		o.w.Header().Set("X-Content-Type-Options", "nosniff")
		o.w.WriteHeader(http.StatusOK)
	}
	if o.writeTimeout > 0 {
		_ = o.rc.SetWriteDeadline(time.Now().Add(o.writeTimeout))
	}
	if pre {
		if _, err := j.WriteTo(o.w); err != nil {
			return false
		}
	}
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		return false
	}
	return o.rc.Flush() == nil
}

// preEncoded returns v's encoding when v is a cell result or event. A
// maximal result is ~66 MiB of JSON; json.Marshal would build it in a
// growing buffer, copy it out, and (for a Result inside an Event or the
// body) validate and compact the Marshaler's bytes into another buffer,
// ~3x the result in garbage per response. cell's encoder writes the same
// bytes straight to the connection through a small buffer, and knows
// their length first (Content-Length). A nil pointer is left to
// json.Marshal ("null").
func preEncoded(v any) (cell.JSON, bool) {
	switch v := v.(type) {
	case cell.Result:
		return cell.ResultJSON(&v), true
	case *cell.Result:
		if v != nil {
			return cell.ResultJSON(v), true
		}
	case cell.Event:
		return cell.EventJSON(&v), true
	case *cell.Event:
		if v != nil {
			return cell.EventJSON(v), true
		}
	}
	return cell.JSON{}, false
}
