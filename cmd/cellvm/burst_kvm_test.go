package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// burstCreates is how many creates TestBurstCreates sends at once: what
// issue 28's load check sent, when 4 of 8 failed past the boot deadline.
const burstCreates = 8

// TestBurstCreates: 8 creates at once through a daemon with default
// flags (templates on, the 60 s boot deadline; only the network off, as
// the rig has none) each succeed, or are refused at once with 503 "full"
// and a Retry-After. None fails by its deadline: the daemon admits the
// boots a few at a time, and each boot's deadline counts from its
// admission. Each asks for 256 MiB, so that the 8 fit the rig's memory
// cap (3/4 of its 4 GiB L1) beside the template build, and all 8 must be
// created (issue 28). It logs p50 and p99 of the creates, and deletes them
// all.
func TestBurstCreates(t *testing.T) {
	kvmtest.Require(t)
	d := startDaemon(t, t.TempDir(), "--network=false", "--templates=true", "--boot-timeout=60s")
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	capa, err := c.Capacity(ctx)
	if err != nil || capa.Boots == nil || capa.Boots.Slots < 1 {
		t.Fatalf("capacity before the burst: %+v, %v; want its boots", capa, err)
	}
	t.Logf("boot queue: %d slots, up to %d waiting", capa.Boots.Slots, capa.Boots.MaxWaiting)

	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	type outcome struct {
		status     int
		retryAfter string
		body       string
		took       time.Duration
		info       sandbox.Info
	}
	out := make([]outcome, burstCreates)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t0 := time.Now()
			resp, err := raw.Post("http://cellvm/v1/sandboxes", "application/json", strings.NewReader(`{"memory_mib": 256}`))
			if err != nil {
				out[i] = outcome{body: err.Error(), took: time.Since(t0)}
				return
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			o := outcome{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b), took: time.Since(t0)}
			if o.status == http.StatusCreated {
				json.Unmarshal(b, &o.info)
			}
			out[i] = o
		}()
	}
	close(start)
	wg.Wait()

	var ok []time.Duration
	refused := 0
	for i, o := range out {
		switch {
		case o.status == http.StatusCreated && o.info.ID != "":
			ok = append(ok, o.took)
			t.Logf("create %d: %v, queued %d ms, boot %d ms, started from %s", i, o.took.Round(time.Millisecond),
				o.info.QueuedMS, o.info.BootMS, o.info.StartedFrom)
			defer func() {
				if err := c.Delete(ctx, o.info.ID); err != nil {
					t.Errorf("delete %s: %v", o.info.ID, err)
				}
			}()
		case o.status == http.StatusServiceUnavailable:
			refused++
			t.Logf("create %d refused after %v: Retry-After %q: %s", i, o.took.Round(time.Millisecond), o.retryAfter, o.body)
			if o.retryAfter == "" || !strings.Contains(o.body, `"full"`) || !strings.Contains(o.body, "queue full") {
				t.Errorf("create %d: 503 without Retry-After or not for a full queue: %q %s", i, o.retryAfter, o.body)
			}
		default:
			t.Errorf("create %d failed after %v: %d %s", i, o.took.Round(time.Millisecond), o.status, o.body)
		}
	}
	if len(ok) > 0 {
		slices.Sort(ok)
		p := func(q float64) time.Duration { return ok[min(len(ok)-1, int(q*float64(len(ok))))] }
		t.Logf("burst of %d creates: %d created, %d refused; create p50 %v, p99 %v", burstCreates, len(ok), refused,
			p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond))
	}
	if room := capa.Boots.Slots + capa.Boots.MaxWaiting; room >= burstCreates && len(ok) != burstCreates {
		t.Errorf("%d of %d creates succeeded, though the line holds %d: every one must", len(ok), burstCreates, room)
	}
	if after, err := c.Capacity(ctx); err != nil || after.Boots == nil || after.Boots.Waiting != 0 || after.Boots.Refused != uint64(refused) {
		t.Errorf("capacity after the burst: %+v, %v; want none waiting and %d refused", after.Boots, err, refused)
	}
}
