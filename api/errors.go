package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// Error codes carried in {"error":{"code":...}}.
const (
	CodeInvalid      = "invalid"       // 400 (405 for a wrong method)
	CodeForbidden    = "forbidden"     // 403: peer uid not allowed, or not the caller's to change
	CodeNotFound     = "not_found"     // 404
	CodeBusy         = "busy"          // 409: a cell is running, or wrong state
	CodeLost         = "lost"          // 410: the sandbox's VM died
	CodeTooLarge     = "too_large"     // 413
	CodeInternal     = "internal"      // 500
	CodeNotSupported = "not_supported" // 501
	CodeFull         = "full"          // 503: host capacity reached, retry later
	CodeUnauthorized = "unauthorized"  // 401: no valid bearer token (TCP listener)
	CodeRateLimited  = "rate_limited"  // 429: too many failed authentications
	CodeQuota        = "quota"         // 429: the tenant is at one of its caps
	CodeUpstream     = "upstream"      // 502: a registry the request named failed or refused
	CodeBuildFailed  = "build_failed"  // 422: an image's step failed (step and tail say which and why)
)

// ErrForbidden matches an *Error with CodeForbidden; it is the contract's
// sentinel.
var ErrForbidden = sandbox.ErrForbidden

// ErrUnauthorized matches an *Error with CodeUnauthorized or
// CodeRateLimited.
var ErrUnauthorized = errors.New("unauthorized")

// codeTable maps each code to its HTTP status and the sentinel error it
// stands for. "full" is 503 rather than 507: the condition is capacity that
// frees up when other sandboxes go, which is what 503 (and Retry-After)
// means to clients and proxies; 507 is WebDAV's storage-quota status.
var codeTable = []struct {
	code     string
	status   int
	sentinel error
}{
	{CodeInvalid, http.StatusBadRequest, sandbox.ErrInvalid},
	{CodeForbidden, http.StatusForbidden, ErrForbidden},
	{CodeNotFound, http.StatusNotFound, sandbox.ErrNotFound},
	{CodeBusy, http.StatusConflict, sandbox.ErrBusy},
	{CodeLost, http.StatusGone, sandbox.ErrLost},
	{CodeTooLarge, http.StatusRequestEntityTooLarge, sandbox.ErrTooLarge},
	{CodeNotSupported, http.StatusNotImplemented, sandbox.ErrNotSupported},
	{CodeFull, http.StatusServiceUnavailable, sandbox.ErrFull},
	{CodeQuota, http.StatusTooManyRequests, sandbox.ErrQuota},
	{CodeUpstream, http.StatusBadGateway, sandbox.ErrUpstream},
	{CodePortClosed, http.StatusBadGateway, sandbox.ErrPortClosed},
	{CodeBuildFailed, http.StatusUnprocessableEntity, sandbox.ErrBuildFailed},
	{CodeUnauthorized, http.StatusUnauthorized, ErrUnauthorized},
	{CodeRateLimited, http.StatusTooManyRequests, ErrUnauthorized},
	{CodeInternal, http.StatusInternalServerError, nil},
}

// Error is an error response from the API. It matches the sandbox sentinel
// errors with errors.Is (a "not_found" Error is sandbox.ErrNotFound), so
// code written against sandbox.Manager works the same over the client.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Step and Tail are set for an image's failed step
	// (sandbox.ImageStepError): the step's name and the end of its
	// output.
	Step string `json:"step,omitempty"`
	Tail string `json:"tail,omitempty"`
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("cellvm api: %s (%d %s): %s", e.Code, e.Status, http.StatusText(e.Status), e.Message)
	if e.Tail != "" {
		msg += "; the last output:\n" + e.Tail
	}
	return msg
}

// Is reports whether target is the sentinel for e's code.
func (e *Error) Is(target error) bool {
	for _, c := range codeTable {
		if c.code == e.Code {
			return c.sentinel != nil && c.sentinel == target
		}
	}
	return false
}

// maxStepTail bounds a failed step's tail in an error body.
const maxStepTail = 16 << 10

// errorBody is the JSON envelope of an error response.
type errorBody struct {
	Error *Error `json:"error"`
}

// errorFor maps an error from the manager (or from request decoding) to
// the response to send.
func errorFor(err error) *Error {
	e := errorForCode(err)
	// A failed image step: its name and output's end travel as fields
	// of their own, not inside the message.
	var se *sandbox.ImageStepError
	if errors.As(err, &se) {
		e.Step, e.Tail = se.Step, clipString(se.Tail, maxStepTail)
		e.Message = strings.TrimSuffix(e.Message, "; the last output:\n"+se.Tail)
	}
	return e
}

func errorForCode(err error) *Error {
	for _, c := range codeTable {
		if c.sentinel != nil && errors.Is(err, c.sentinel) {
			return &Error{Status: c.status, Code: c.code, Message: err.Error()}
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: fmt.Sprintf("request body larger than %d bytes", mbe.Limit)}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
}

// As makes errors.As(err, &stepErr) work on a client's error as on the
// manager's: a failed step's answer (Step set) reads as a
// *sandbox.ImageStepError naming the step, with the tail, wrapping e
// (which is sandbox.ErrBuildFailed).
func (e *Error) As(target any) bool {
	t, ok := target.(**sandbox.ImageStepError)
	if !ok || e.Step == "" {
		return false
	}
	*t = &sandbox.ImageStepError{Step: e.Step, Tail: e.Tail, Err: e}
	return true
}
