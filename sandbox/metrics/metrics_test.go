package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// value finds one sample of a gathered family by its labels: a counter's
// or gauge's value, or a histogram's sample count.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		ok := false
		for _, l := range m.GetLabel() {
			ok = ok || l.GetName() == kv[i] && l.GetValue() == kv[i+1]
		}
		if !ok {
			return false
		}
	}
	return true
}

func TestMetricsMove(t *testing.T) {
	ctx := context.Background()
	fake := sandboxtest.New()
	fake.Script = func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		switch c.Code {
		case "boom":
			return cell.Result{Status: cell.StatusError, Error: &cell.Error{Name: "ValueError"}}, nil
		case "oom":
			return cell.Result{Status: cell.StatusLost, KilledBy: cell.KilledByOOM}, nil
		}
		return cell.Result{}, sandboxtest.Pass
	}
	fake.MaxSandboxes = 3
	reg := prometheus.NewRegistry()
	m := Instrument(fake, reg)

	a, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Create(ctx, sandbox.Config{MemoryMiB: 256})
	m.Create(ctx, sandbox.Config{VCPUs: 999}) // refused: an error outcome
	if got := value(t, reg, "cellvm_sandbox_create_seconds", "outcome", "ok"); got != 2 {
		t.Errorf("creates ok: %v", got)
	}
	if got := value(t, reg, "cellvm_sandbox_create_seconds", "outcome", "error"); got != 1 {
		t.Errorf("creates refused: %v", got)
	}
	if got := value(t, reg, "cellvm_boot_seconds"); got != 2 {
		t.Errorf("boot times observed: %v", got)
	}
	for _, code := range []string{"x = 1", "x", "boom", "oom"} {
		if _, err := m.RunCell(ctx, a.ID, sandbox.Cell{Code: code, Timeout: time.Minute}, nil); err != nil {
			t.Fatal(err)
		}
	}
	m.RunCell(ctx, "sb-none", sandbox.Cell{Code: "1", Timeout: time.Minute}, nil) // not a cell
	for _, c := range []struct {
		status, killed string
		want           float64
	}{{"ok", "none", 2}, {"error", "none", 1}, {"lost", "oom", 1}} {
		if got := value(t, reg, "cellvm_cells_total", "status", c.status, "killed_by", c.killed); got != c.want {
			t.Errorf("cells %s/%s: %v, want %v", c.status, c.killed, got, c.want)
		}
	}
	if got := value(t, reg, "cellvm_cell_seconds"); got != 4 {
		t.Errorf("cell latencies: %v", got)
	}
	if _, err := m.RunCell(ctx, a.ID, sandbox.Cell{Session: sandbox.Session{Language: "js"}, Code: "x = 2", Timeout: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "cellvm_cells_total", "status", "ok", "language", "javascript"); got != 1 {
		t.Errorf("javascript cells: %v, want 1", got)
	}
	if got := value(t, reg, "cellvm_cells_total", "status", "ok", "language", "python"); got != 2 {
		t.Errorf("python cells: %v, want 2", got)
	}
	m.Exec(ctx, a.ID, sandbox.ExecRequest{Argv: []string{"echo"}, Timeout: time.Second})
	if got := value(t, reg, "cellvm_exec_seconds"); got != 1 {
		t.Errorf("exec latencies: %v", got)
	}

	m.Pause(ctx, b.ID)
	if value(t, reg, "cellvm_sandboxes", "state", "running") != 1 || value(t, reg, "cellvm_sandboxes", "state", "paused") != 1 ||
		value(t, reg, "cellvm_sandboxes", "state", "lost") != 0 {
		t.Error("sandboxes by state are not 1 running, 1 paused, 0 lost")
	}
	if value(t, reg, "cellvm_host_sandboxes_used") != 2 || value(t, reg, "cellvm_host_sandboxes_free") != 1 ||
		value(t, reg, "cellvm_host_memory_mib_used") != 512+256 {
		t.Error("capacity gauges wrong")
	}

	// Egress: a sandbox's counters add up, and deleting it takes nothing
	// back from the totals.
	fake.SetNetworkCounters(a.ID, sandbox.NetworkCounters{AllowedPackets: 10, DroppedPackets: 2})
	if value(t, reg, "cellvm_egress_packets_total", "verdict", "allowed") != 10 {
		t.Error("allowed packets not counted")
	}
	fake.SetNetworkCounters(a.ID, sandbox.NetworkCounters{AllowedPackets: 15, DroppedPackets: 3})
	fake.SetNetworkCounters(b.ID, sandbox.NetworkCounters{DroppedPackets: 4})
	if value(t, reg, "cellvm_egress_packets_total", "verdict", "allowed") != 15 || value(t, reg, "cellvm_egress_packets_total", "verdict", "dropped") != 7 {
		t.Error("egress totals wrong after growth")
	}
	m.Delete(ctx, a.ID)
	if value(t, reg, "cellvm_egress_packets_total", "verdict", "allowed") != 15 {
		t.Error("a deleted sandbox's packets went from the total")
	}
}

// bootQueueManager reports a queue of VM starts and a create that waited.
type bootQueueManager struct{ *sandboxtest.Manager }

func (b bootQueueManager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	info, err := b.Manager.Create(ctx, cfg)
	info.QueuedMS = 1500
	return info, err
}

func (b bootQueueManager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	c, err := b.Manager.Capacity(ctx)
	c.Boots = &sandbox.BootQueue{Slots: 3, Starting: 2, Waiting: 5, MaxWaiting: 12, Admitted: 9, Refused: 4}
	return c, err
}

// TestBootQueueMetrics: a create's wait for a slot is a histogram, and the
// queue's slots, starts, line and refusals are read at each scrape.
func TestBootQueueMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := Instrument(bootQueueManager{sandboxtest.New()}, reg)
	if _, err := m.Create(context.Background(), sandbox.Config{}); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "cellvm_boot_queue_seconds"); got != 1 {
		t.Errorf("queue wait observations: %v, want 1", got)
	}
	for name, want := range map[string]float64{"cellvm_boot_slots": 3, "cellvm_boot_starting": 2,
		"cellvm_boot_queue_length": 5, "cellvm_boot_queue_refused_total": 4} {
		if got := value(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
