package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cellvm/cellvm/sandbox"
)

func TestLogsTailAndFollow(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	id := mustCreate(t, e)
	for _, src := range []sandbox.LogSource{sandbox.LogConsole, sandbox.LogAgent} {
		if err := e.fake.AppendLog(id, src, "one", "two", "three"); err != nil {
			t.Fatal(err)
		}
	}

	var got []string
	collect := func(l sandbox.LogLine) error { got = append(got, l.Text); return nil }
	if err := e.client.Logs(ctx, id, sandbox.LogRequest{Source: sandbox.LogConsole, Tail: 2}, collect); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "two|three" {
		t.Errorf("tail 2: %q", got)
	}
	status, _, body := e.do(t, "GET", "/v1/sandboxes/"+id+"/logs?source=kernel", nil)
	wantAPIError(t, "bad source", status, body, http.StatusBadRequest, CodeInvalid)
	status, _, body = e.do(t, "GET", "/v1/sandboxes/"+id+"/logs?tail=many", nil)
	wantAPIError(t, "bad tail", status, body, http.StatusBadRequest, CodeInvalid)
	err := e.client.Logs(ctx, "sb-none", sandbox.LogRequest{Source: sandbox.LogVMM, Tail: 1, Follow: true}, collect)
	wantClientError(t, "follow of an unknown sandbox", err, http.StatusNotFound, CodeNotFound)

	// Follow: the tail, then lines as they are written, until the
	// sandbox goes.
	lines := make(chan string, 8)
	done := make(chan error, 1)
	go func() {
		done <- e.client.Logs(ctx, id, sandbox.LogRequest{Source: sandbox.LogAgent, Tail: 1, Follow: true},
			func(l sandbox.LogLine) error {
				if l.Source != sandbox.LogAgent {
					t.Errorf("line of source %q", l.Source)
				}
				lines <- l.Text
				return nil
			})
	}()
	if l := <-lines; l != "three" {
		t.Fatalf("follow's tail: %q", l)
	}
	if err := e.fake.AppendLog(id, sandbox.LogAgent, "four"); err != nil {
		t.Fatal(err)
	}
	if l := <-lines; l != "four" {
		t.Fatalf("followed line: %q", l)
	}
	if err := e.fake.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("follow ended with %v", err)
	}
}

func TestEventsInOrder(t *testing.T) {
	e := newTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := e.client.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := mustCreate(t, e)
	steps := []func() error{
		func() error { return e.client.Pause(ctx, id) },
		func() error { return e.client.Resume(ctx, id) },
		func() error { return e.client.SetNetwork(ctx, id, sandbox.NetworkPolicy{Allow: []string{"pypi.org"}}) },
		func() error { return e.client.Delete(ctx, id) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	want := []sandbox.EventType{sandbox.EventCreated, sandbox.EventPaused, sandbox.EventResumed, sandbox.EventPolicyChanged, sandbox.EventDeleted}
	var seq uint64
	for i, w := range want {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Type != w || ev.Sandbox != id || ev.Seq <= seq || ev.Time.IsZero() {
			t.Errorf("event %d: %+v, want %s of %s with a growing seq", i, ev, w, id)
		}
		seq = ev.Seq
		if w == sandbox.EventPolicyChanged && (ev.Network == nil || ev.Network.Allow[0] != "pypi.org") {
			t.Errorf("policy event without the policy: %+v", ev)
		}
		if w == sandbox.EventDeleted && ev.Reason != sandbox.DeletedByRequest {
			t.Errorf("deleted event reason %q", ev.Reason)
		}
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := st.Next(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after its context ended: %v", err)
	}
}

func TestCapacityRoute(t *testing.T) {
	e := newTestEnv(t)
	mustCreate(t, e)
	c, err := e.client.Capacity(context.Background())
	want, _ := e.fake.Capacity(context.Background())
	if err != nil || c.Sandboxes != 1 || c.MaxMemoryMiB == 0 || c.MemoryMiBUsed != 1024 || !reflect.DeepEqual(c, want) {
		t.Errorf("capacity %+v %v, want the manager's %+v", c, err, want)
	}
}

// scrape fetches /metrics and parses it with the Prometheus library's own
// text parser.
func scrape(t *testing.T, c *Client) map[string]*metricFamily {
	t.Helper()
	b, err := c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, b)
	}
	return fams
}

type metricFamily = dto.MetricFamily

func counterValue(fams map[string]*metricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range labels {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if match && m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestMetricsRequestCounters(t *testing.T) {
	e := newTestEnv(t)
	route := map[string]string{"route": "GET /v1/sandboxes/{id}", "code": "404"}
	before := counterValue(scrape(t, e.client), "cellvm_api_requests_total", route)
	for i := 0; i < 3; i++ {
		e.client.Get(context.Background(), "sb-none")
	}
	fams := scrape(t, e.client)
	if got := counterValue(fams, "cellvm_api_requests_total", route); got != before+3 {
		t.Errorf("404s on GET /v1/sandboxes/{id}: %v after %v, want 3 more", got, before)
	}
	if counterValue(fams, "cellvm_api_requests_total", map[string]string{"route": "GET /metrics", "code": "200"}) < 1 {
		t.Error("the first scrape is not counted")
	}
}
