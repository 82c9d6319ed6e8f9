package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// failing serves the given statuses (with Retry-After values) and then 200.
func failing(statuses []int, retryAfter []string) (*httptest.Server, *int) {
	n := 0
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := n
		n++
		if i < len(statuses) {
			if retryAfter[i] != "" {
				w.Header().Set("Retry-After", retryAfter[i])
			}
			w.WriteHeader(statuses[i])
			fmt.Fprintf(w, `{"type":"error","error":{"type":"overloaded_error","message":"busy %d"}}`, i)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	})), &n
}

func TestCallerRetriesHonourRetryAfter(t *testing.T) {
	hs, n := failing([]int{429, 529, 500}, []string{"3", "", "0.5"})
	defer hs.Close()
	var waits []time.Duration
	c := &Caller{Provider: "test", BaseDelay: time.Second, MaxDelay: 4 * time.Second,
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	var out struct{ OK bool }
	if err := c.PostJSON(context.Background(), hs.URL, nil, map[string]int{"a": 1}, &out); err != nil || !out.OK {
		t.Fatalf("PostJSON = %v, %+v", err, out)
	}
	if *n != 4 || len(waits) != 3 {
		t.Fatalf("%d requests, waits %v", *n, waits)
	}
	if waits[0] != 3*time.Second || waits[2] != 500*time.Millisecond {
		t.Errorf("waits %v: Retry-After not honoured", waits)
	}
	if waits[1] < time.Second || waits[1] > 2*time.Second {
		t.Errorf("backoff wait %v outside [1s, 2s] for attempt 2", waits[1])
	}
}

func TestCallerBoundedRetries(t *testing.T) {
	hs, n := failing([]int{503, 503, 503, 503, 503, 503, 503}, make([]string, 7))
	defer hs.Close()
	var waits []time.Duration
	c := &Caller{Provider: "test", MaxRetries: 2, MaxDelay: 2 * time.Second,
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	err := c.PostJSON(context.Background(), hs.URL, nil, struct{}{}, &struct{}{})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.Attempts != 3 || *n != 3 {
		t.Fatalf("err = %v after %d requests; want 503 after 3", err, *n)
	}
	if !strings.Contains(err.Error(), "overloaded_error: busy 2") || !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Errorf("error does not say what the API said: %v", err)
	}
	for _, w := range waits {
		if w > 2*time.Second {
			t.Errorf("wait %v above MaxDelay", w)
		}
	}
}

func TestCallerRefusesLongRetryAfter(t *testing.T) {
	hs, n := failing([]int{429}, []string{"3600"})
	defer hs.Close()
	c := &Caller{Provider: "test", Sleep: func(ctx context.Context, d time.Duration) error { t.Errorf("slept %v", d); return nil }}
	err := c.PostJSON(context.Background(), hs.URL, nil, struct{}{}, &struct{}{})
	if err == nil || *n != 1 || !strings.Contains(err.Error(), "asked to wait 1h0m0s") {
		t.Errorf("err = %v after %d requests", err, *n)
	}
}

func TestCallerNoRetryOn4xx(t *testing.T) {
	hs, n := failing([]int{401}, []string{""})
	defer hs.Close()
	c := &Caller{Provider: "test", Sleep: func(ctx context.Context, d time.Duration) error { return nil }}
	err := c.PostJSON(context.Background(), hs.URL, nil, struct{}{}, &struct{}{})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 401 || *n != 1 {
		t.Errorf("err = %v after %d requests", err, *n)
	}
}
