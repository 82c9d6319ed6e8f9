package agent

import (
	"bytes"
	"context"
	"encoding/json"

	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// APIError is a model API's refusal or failure, with what the API said.
type APIError struct {
	Provider string
	// Status is the HTTP status; 0 when no response came back.
	Status int
	// Type is the API's error type or code ("rate_limit_error",
	// "invalid_request_error", "RESOURCE_EXHAUSTED").
	Type      string
	Message   string
	RequestID string
	// Attempts is how many requests were sent in all.
	Attempts int
	// Err is the transport error when no response came back.
	Err error
	// RetryAfter is the wait the API asked for (Retry-After or
	// retry-after-ms), when it asked.
	RetryAfter time.Duration

	hasRetryAfter bool
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s API", e.Provider)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Type != "" {
		fmt.Fprintf(&b, " %s", e.Type)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request id %s)", e.RequestID)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (gave up after %d attempts)", e.Attempts)
	}
	return b.String()
}

func (e *APIError) Unwrap() error { return e.Err }

// Retryable reports whether the failure is worth another try: rate limits
// (429), server errors (5xx, including Anthropic's 529 "overloaded"), and
// requests that got no response at all.
func (e *APIError) Retryable() bool {
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// Caller posts JSON to a model API with bounded retries. The zero value
// works; fields override the defaults.
type Caller struct {
	Provider string
	Client   *http.Client
	// MaxRetries is how many times a retryable failure is retried
	// (default 4; negative means none).
	MaxRetries int
	// BaseDelay and MaxDelay bound the exponential backoff used when the
	// API gives no Retry-After (defaults 1 s and 30 s).
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter is the longest Retry-After honoured; an API asking for
	// a longer wait makes the call fail at once, saying so (default 2 min).
	MaxRetryAfter time.Duration
	// MaxResponseBytes bounds a response body (default 64 MiB).
	MaxResponseBytes int64
	// Sleep waits between attempts; tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// PostJSON sends body as JSON to url with header and decodes a 2xx
// response into out. Failures come back as *APIError.
func (c *Caller) PostJSON(ctx context.Context, url string, header http.Header, body, out any) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", c.Provider, err)
	}
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	retries := c.MaxRetries
	if retries == 0 {
		retries = 4
	}
	sleep := c.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	for attempt := 1; ; attempt++ {
		raw, apiErr := c.once(ctx, client, url, header, payload)
		if apiErr == nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return &APIError{Provider: c.Provider, Status: http.StatusOK, Message: "the response is not the JSON expected: " + err.Error(), Attempts: attempt}
			}
			return nil
		}
		apiErr.Attempts = attempt
		if ctx.Err() != nil {
			apiErr.Err = ctx.Err()
			return apiErr
		}
		if !apiErr.Retryable() || attempt > retries {
			return apiErr
		}
		wait, fromHeader := c.delay(attempt, apiErr)
		if fromHeader && wait > c.maxRetryAfter() {
			apiErr.Message += fmt.Sprintf(" (the API asked to wait %s before retrying, longer than the %s allowed)", wait, c.maxRetryAfter())
			return apiErr
		}
		if err := sleep(ctx, wait); err != nil {
			apiErr.Err = err
			return apiErr
		}
	}
}

func (c *Caller) maxRetryAfter() time.Duration {
	if c.MaxRetryAfter > 0 {
		return c.MaxRetryAfter
	}
	return 2 * time.Minute
}

func (c *Caller) once(ctx context.Context, client *http.Client, url string, header http.Header, payload []byte) ([]byte, *APIError) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, &APIError{Provider: c.Provider, Err: err}
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, &APIError{Provider: c.Provider, Err: err}
	}
	defer resp.Body.Close()
	limit := c.MaxResponseBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &APIError{Provider: c.Provider, Status: resp.StatusCode, Err: fmt.Errorf("read response: %w", err)}
	}
	if int64(len(raw)) > limit {
		return nil, &APIError{Provider: c.Provider, Status: resp.StatusCode, Message: fmt.Sprintf("response larger than %d bytes", limit)}
	}
	if resp.StatusCode/100 == 2 {
		return raw, nil
	}
	e := &APIError{Provider: c.Provider, Status: resp.StatusCode, RequestID: requestID(resp.Header)}
	e.Type, e.Message = parseErrorBody(raw)
	if d, ok := parseRetryAfter(resp.Header, time.Now()); ok {
		e.RetryAfter = d
		e.hasRetryAfter = true
	}
	return nil, e
}

// delay is the wait before the next attempt: what the API asked for, or
// exponential backoff with jitter, capped.
func (c *Caller) delay(attempt int, e *APIError) (time.Duration, bool) {
	if e.hasRetryAfter {
		return e.RetryAfter, true
	}
	base, maxD := c.BaseDelay, c.MaxDelay
	if base <= 0 {
		base = time.Second
	}
	if maxD <= 0 {
		maxD = 30 * time.Second
	}
	d := base << min(attempt-1, 20)
	if d <= 0 || d > maxD {
		d = maxD
	}
	// Full jitter over the upper half keeps clients that failed together
	// from retrying together.
	return d/2 + rand.N(d/2+1), false
}

// parseRetryAfter reads retry-after-ms (OpenAI) or Retry-After in seconds
// or as an HTTP date.
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s > 1e6 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func requestID(h http.Header) string {
	for _, k := range []string{"request-id", "x-request-id"} {
		if v := h.Get(k); v != "" {
			return clipName(v)
		}
	}
	return ""
}

// parseErrorBody reads the error shapes of the APIs:
//
//	Anthropic {"type":"error","error":{"type":"rate_limit_error","message":"..."}}
//	OpenAI    {"error":{"message":"...","type":"...","code":"..."}}
//	Gemini    {"error":{"code":429,"message":"...","status":"RESOURCE_EXHAUSTED"}}
//
// and falls back to the start of the body.
func parseErrorBody(raw []byte) (typ, msg string) {
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && len(body.Error) > 0 {
		var e struct {
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
			Status  string          `json:"status"`
			Message string          `json:"message"`
		}
		if json.Unmarshal(body.Error, &e) == nil {
			typ = e.Type
			if typ == "" {
				typ = e.Status
			}
			if typ == "" && len(e.Code) > 0 && string(e.Code) != "null" {
				typ = strings.Trim(string(e.Code), `"`)
			}
			m, _ := ClipMiddle(e.Message, 2000)
			return clipName(typ), m
		}
		var s string
		if json.Unmarshal(body.Error, &s) == nil {
			m, _ := ClipMiddle(s, 2000)
			return "", m
		}
	}
	m, _ := ClipMiddle(strings.TrimSpace(strings.ToValidUTF8(string(raw), "?")), 500)
	return "", m
}
