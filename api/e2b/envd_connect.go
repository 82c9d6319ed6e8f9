package e2b

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// A small Connect protocol server, JSON only: what @connectrpc/connect-web
// speaks with useBinaryFormat false, as the e2b SDK configures it. Written
// here rather than taken from connect-go because that one wants
// generated protobuf types for envd's services, and the SDK's wire is
// JSON of a dozen messages that plain Go structs with the proto3 JSON
// names describe well.
//
// Unary: POST application/json, the message as the body; the answer is
// 200 with the message, or an HTTP status and {"code","message"}.
// Server streaming: POST application/connect+json; request and answers
// are envelopes (a flags byte, a 4-byte big-endian length, the JSON);
// the last envelope has flag 0x02 and holds {} or {"error":{...}}. A
// stream's status is always 200.

// Connect error codes (the ones this server sends).
const (
	codeCanceled           = "canceled"
	codeInvalidArgument    = "invalid_argument"
	codeDeadlineExceeded   = "deadline_exceeded"
	codeNotFound           = "not_found"
	codeAlreadyExists      = "already_exists"
	codePermissionDenied   = "permission_denied"
	codeResourceExhausted  = "resource_exhausted"
	codeFailedPrecondition = "failed_precondition"
	codeUnimplemented      = "unimplemented"
	codeInternal           = "internal"
	codeUnavailable        = "unavailable"
)

// connectHTTPStatus is the HTTP status of a unary error, per the protocol.
var connectHTTPStatus = map[string]int{
	codeCanceled:           499,
	codeInvalidArgument:    http.StatusBadRequest,
	codeDeadlineExceeded:   http.StatusGatewayTimeout,
	codeNotFound:           http.StatusNotFound,
	codeAlreadyExists:      http.StatusConflict,
	codePermissionDenied:   http.StatusForbidden,
	codeResourceExhausted:  http.StatusTooManyRequests,
	codeFailedPrecondition: http.StatusBadRequest,
	codeUnimplemented:      http.StatusNotImplemented,
	codeInternal:           http.StatusInternalServerError,
	codeUnavailable:        http.StatusServiceUnavailable,
}

// connectError is an error with its Connect code.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *connectError) Error() string { return e.Code + ": " + e.Message }

func connectErrorf(code, format string, args ...any) *connectError {
	return &connectError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// connectErrorOf maps a Manager's error (or a connectError) to its code.
// Internal errors say nothing of themselves to the caller.
func connectErrorOf(err error) *connectError {
	var ce *connectError
	if errors.As(err, &ce) {
		return ce
	}
	var code string
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		code = codeNotFound
	case errors.Is(err, sandbox.ErrInvalid):
		code = codeInvalidArgument
	case errors.Is(err, sandbox.ErrForbidden):
		code = codePermissionDenied
	case errors.Is(err, sandbox.ErrFull), errors.Is(err, sandbox.ErrTooLarge), errors.Is(err, sandbox.ErrQuota):
		code = codeResourceExhausted
	case errors.Is(err, sandbox.ErrBusy):
		code = codeFailedPrecondition
	case errors.Is(err, sandbox.ErrLost):
		code = codeUnavailable
	case errors.Is(err, sandbox.ErrNotSupported):
		code = codeUnimplemented
	case errors.Is(err, context.DeadlineExceeded):
		return connectErrorf(codeDeadlineExceeded, "the request's timeout passed")
	case errors.Is(err, context.Canceled):
		return connectErrorf(codeCanceled, "the request was cancelled")
	default:
		return connectErrorf(codeInternal, "internal error")
	}
	return &connectError{Code: code, Message: err.Error()}
}

// connectMaxMessage bounds one request message: SendInput's data
// (MaxProcessInput) as base64, with room for the rest.
const connectMaxMessage = sandbox.MaxProcessInput*4/3 + 64<<10

// connectUnary answers a unary call: it decodes the request into req,
// calls fn and writes its answer or its error.
func connectUnary[Req any](w http.ResponseWriter, r *http.Request, fn func(ctx context.Context, req *Req) (any, error)) {
	ctx, cancel, err := connectContext(r)
	if err != nil {
		connectWriteUnaryError(w, err)
		return
	}
	defer cancel()
	if err := connectCheck(r, "application/json"); err != nil {
		if err.Code == "" {
			http.Error(w, err.Message, http.StatusUnsupportedMediaType)
			return
		}
		connectWriteUnaryError(w, err)
		return
	}
	b, rerr := io.ReadAll(io.LimitReader(r.Body, connectMaxMessage+1))
	if rerr != nil {
		connectWriteUnaryError(w, connectErrorf(codeInvalidArgument, "reading the request: %v", rerr))
		return
	}
	if len(b) > connectMaxMessage {
		connectWriteUnaryError(w, connectErrorf(codeResourceExhausted, "the request is larger than %d bytes", connectMaxMessage))
		return
	}
	req := new(Req)
	if err := connectDecode(b, req); err != nil {
		connectWriteUnaryError(w, err)
		return
	}
	res, ferr := fn(ctx, req)
	if ferr != nil {
		connectWriteUnaryError(w, connectErrorOf(ferr))
		return
	}
	out, merr := json.Marshal(res)
	if merr != nil {
		connectWriteUnaryError(w, connectErrorf(codeInternal, "internal error"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

func connectWriteUnaryError(w http.ResponseWriter, e *connectError) {
	status, ok := connectHTTPStatus[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// connectStream is one server-streaming call's answer. Send may be
// called from any goroutine; after the handler has ended the stream,
// Send fails.
type connectStream struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	rc     *http.ResponseController
	closed bool
	err    error // the first write error: the client is gone
}

// Send writes one message envelope.
func (st *connectStream) Send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return st.write(0, b)
}

func (st *connectStream) write(flags byte, b []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return errors.New("the stream has ended")
	}
	if st.err != nil {
		return st.err
	}
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := st.w.Write(append(hdr[:], b...)); err != nil {
		st.err = err
		return err
	}
	if err := st.rc.Flush(); err != nil {
		st.err = err
		return err
	}
	return nil
}

// end writes the end-of-stream envelope with err (nil: success) and
// closes the stream to later Sends.
func (st *connectStream) end(err error) {
	var body []byte
	if err == nil {
		body = []byte("{}")
	} else {
		body, _ = json.Marshal(struct {
			Error *connectError `json:"error"`
		}{connectErrorOf(err)})
	}
	st.write(2, body)
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
}

// connectServerStream answers a server-streaming call: it reads the one
// request envelope into req, starts the stream and calls fn, whose
// error ends the stream. keepalive, if not nil, is the message sent
// every Keepalive-Ping-Interval seconds when the client asks for pings.
func connectServerStream[Req any](w http.ResponseWriter, r *http.Request, keepalive any, fn func(ctx context.Context, req *Req, st *connectStream) error) {
	if err := connectCheck(r, "application/connect+json"); err != nil && err.Code == "" {
		http.Error(w, err.Message, http.StatusUnsupportedMediaType)
		return
	}
	// The request is read before the answer starts: an HTTP/1 server
	// may not read a body once it has written.
	req := new(Req)
	cerr := connectCheck(r, "application/connect+json")
	if cerr == nil {
		cerr = connectReadEnvelope(r.Body, req)
	}
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	st := &connectStream{w: w, rc: http.NewResponseController(w)}
	if cerr != nil {
		st.end(cerr)
		return
	}
	st.rc.Flush()
	ctx, cancel, err := connectContext(r)
	if err != nil {
		st.end(err)
		return
	}
	defer cancel()
	if keepalive != nil {
		if every := connectKeepalive(r); every > 0 {
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				t := time.NewTicker(every)
				defer t.Stop()
				for {
					select {
					case <-t.C:
						if st.Send(keepalive) != nil {
							return
						}
					case <-stop:
						return
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	}
	st.end(fn(ctx, req, st))
}

// connectCheck refuses other encodings than JSON, and compression. An
// error without a Code is an unsupported media type (HTTP 415).
func connectCheck(r *http.Request, want string) *connectError {
	if r.Method != http.MethodPost {
		return connectErrorf(codeUnimplemented, "Connect calls here take POST")
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != want {
		return &connectError{Message: fmt.Sprintf("content type %q: this envd speaks Connect with JSON (%s)", clipCaller(ct), want)}
	}
	for _, h := range []string{"Content-Encoding", "Connect-Content-Encoding"} {
		if e := r.Header.Get(h); e != "" && e != "identity" {
			return connectErrorf(codeUnimplemented, "compression %q is not supported", clipCaller(e))
		}
	}
	return nil
}

// connectContext is the request's context bounded by Connect-Timeout-Ms.
func connectContext(r *http.Request) (context.Context, context.CancelFunc, *connectError) {
	d, err := connectTimeout(r)
	if err != nil {
		return nil, nil, err
	}
	if d > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	return ctx, cancel, nil
}

// connectTimeout reads Connect-Timeout-Ms (0: none).
func connectTimeout(r *http.Request) (time.Duration, *connectError) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || len(v) > 10 {
		return 0, connectErrorf(codeInvalidArgument, "Connect-Timeout-Ms %q is not a count of milliseconds", clipCaller(v))
	}
	d := time.Duration(ms) * time.Millisecond
	if d > sandbox.MaxTTL {
		d = sandbox.MaxTTL
	}
	return d, nil
}

// connectKeepalive reads Keepalive-Ping-Interval (seconds), bounded to
// 1 s..1 h; 0 when absent or not a number.
func connectKeepalive(r *http.Request) time.Duration {
	n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

// connectReadEnvelope reads the one message of a server-streaming call.
func connectReadEnvelope(body io.Reader, v any) *connectError {
	var hdr [5]byte
	if _, err := io.ReadFull(body, hdr[:]); err != nil {
		return connectErrorf(codeInvalidArgument, "the request holds no Connect envelope: %v", err)
	}
	if hdr[0]&1 != 0 {
		return connectErrorf(codeUnimplemented, "compressed messages are not supported")
	}
	if hdr[0] != 0 {
		return connectErrorf(codeInvalidArgument, "the request envelope has flags %#x", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > connectMaxMessage {
		return connectErrorf(codeResourceExhausted, "the request is larger than %d bytes", connectMaxMessage)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(body, b); err != nil {
		return connectErrorf(codeInvalidArgument, "the request envelope is cut short: %v", err)
	}
	return connectDecode(b, v)
}

// connectDecode decodes a JSON message; unknown fields are ignored, as
// newer SDKs may send ones this server does not know.
func connectDecode(b []byte, v any) *connectError {
	if len(b) == 0 {
		b = []byte("{}")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return connectErrorf(codeInvalidArgument, "the request is not the JSON message expected: %v", err)
	}
	return nil
}
