package engine

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestTemplateRetryDelays: a failed build is tried again after RetryMin,
// doubling with each failure in a row, capped at Retry.
func TestTemplateRetryDelays(t *testing.T) {
	o := TemplateOptions{RetryMin: 5 * time.Second, Retry: 2 * time.Minute}
	want := []time.Duration{5 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second,
		80 * time.Second, 2 * time.Minute, 2 * time.Minute}
	for n, w := range want {
		if got := o.retryDelay(n); got != w {
			t.Errorf("after %d failures: %v, want %v", n, got, w)
		}
	}
	if got := o.retryDelay(1 << 20); got != o.Retry {
		t.Errorf("after many failures: %v, want the cap %v", got, o.Retry)
	}
	huge := TemplateOptions{RetryMin: time.Second, Retry: 1<<63 - 1}
	if got := huge.retryDelay(100); got <= 0 {
		t.Errorf("a huge cap overflows: %v", got)
	}
	ts := newTemplates(nil, TemplateOptions{}, t.TempDir(), slog.New(slog.DiscardHandler))
	if ts.opt.RetryMin != 5*time.Second || ts.opt.Retry != 2*time.Minute {
		t.Errorf("defaults: first retry %v, cap %v; want 5 s and 2 min", ts.opt.RetryMin, ts.opt.Retry)
	}
}

// TestTemplateFailedBuildRetriedSoon: with a cap of an hour (what a fixed
// Retry would wait), a build that keeps failing is tried again after
// RetryMin and its doublings, and capacity says how many failed and when
// the next try is.
func TestTemplateFailedBuildRetriedSoon(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_WARM", "fail")
	m, _, _ := newTemplateManager(t, func(o *Options) { o.Templates.RetryMin = 20 * time.Millisecond })
	tpl := waitTemplateWhere(t, m, "template failed 3 times", func(in sandbox.TemplateInfo) bool {
		return in.State == sandbox.TemplateFailed && in.Failures >= 3
	})
	if tpl.RetryInMS > time.Hour.Milliseconds() || tpl.ReadyAfterMS != nil {
		t.Errorf("failed template %+v: retry_in_ms past the cap, or ready_after_ms set", tpl)
	}
}

// TestTemplateReadyAfter: a template built after the start says when it
// became ready, and the log says so too.
func TestTemplateReadyAfter(t *testing.T) {
	m, _, logs := newTemplateManager(t, nil)
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	if tpl.ReadyAfterMS == nil || *tpl.ReadyAfterMS <= 0 || tpl.Failures != 0 {
		t.Errorf("ready template %+v: want ready_after_ms and no failures", tpl)
	}
	if l := logs.String(); !strings.Contains(l, `msg="template ready"`) || !strings.Contains(l, "ready_after_ms=") {
		t.Errorf("log has no template ready line with ready_after_ms:\n%s", logs.String())
	}
}
