package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/cellvm/cellvm/sandbox"
)

// E2B's control plane answers errors as {"code": STATUS, "message": TEXT}
// (its openapi's Error schema). The SDK turns the status into its own
// error classes: 401 AuthenticationError, 429 RateLimitError, 503
// ServiceBusyError, 404 (on the calls that check it) NotFoundError or
// SandboxNotFoundError, anything else SandboxError "STATUS: TEXT". So the
// status is what matters, and the message is shown to the user as it is.

// apiError is one error answer of the control plane.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// statusOf maps the contract's sentinel errors to E2B's statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrBuildFailed):
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, sandbox.ErrBusy), errors.Is(err, sandbox.ErrLost):
		return http.StatusConflict
	case errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, sandbox.ErrQuota):
		return http.StatusTooManyRequests
	case errors.Is(err, sandbox.ErrFull):
		return http.StatusServiceUnavailable
	case errors.Is(err, sandbox.ErrNotSupported):
		return http.StatusNotImplemented
	case errors.Is(err, sandbox.ErrUpstream), errors.Is(err, sandbox.ErrPortClosed):
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// writeError answers err in E2B's shape. An error that wraps no sentinel
// is internal: it is logged and the caller gets a generic message, since
// its text may name host paths.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	status := statusOf(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		log.Error("e2b: internal error", "err", err)
		msg = "internal error; the daemon's log has the details"
	}
	if d, ok := sandbox.RetryAfter(err); ok && d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(d.Seconds())+1))
	}
	writeStatus(w, status, msg)
}

// writeStatus answers status with msg in E2B's shape.
func writeStatus(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

func writeErrorf(w http.ResponseWriter, status int, format string, args ...any) {
	writeStatus(w, status, fmt.Sprintf(format, args...))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"encoding the answer failed"}`)
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
