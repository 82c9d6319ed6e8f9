package api

import (
	"encoding/json"
	"net/http"
	"time"
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
	b, err := json.Marshal(v)
	if err != nil {
		return false
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
	if _, err := o.w.Write(append(b, '\n')); err != nil {
		return false
	}
	return o.rc.Flush() == nil
}
