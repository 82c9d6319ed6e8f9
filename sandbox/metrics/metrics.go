// Package metrics measures a sandbox.Manager for Prometheus: it wraps the
// manager the daemon serves (so the HTTP API, the MCP server and anything
// else that reaches sandboxes through it are counted alike) and reads the
// manager's own state (sandboxes by state, egress counters, capacity) at
// each scrape, so no number is kept twice.
package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Manager is a sandbox.Manager that records what passes through it.
type Manager struct {
	sandbox.Manager

	create *prometheus.HistogramVec
	cell   prometheus.Histogram
	exec   prometheus.Histogram
	cells  *prometheus.CounterVec
	boot   prometheus.Histogram
	queued prometheus.Histogram
}

// latencyBuckets span a quick cell (1 ms) to a long one (about 17 min).
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 4, 11)

// Instrument wraps m and registers its metrics, and a collector of m's
// state, in reg.
func Instrument(m sandbox.Manager, reg prometheus.Registerer) *Manager {
	w := &Manager{
		Manager: m,
		create: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cellvm_sandbox_create_seconds", Help: "Time to create a sandbox (boot included), by outcome (ok, error).",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		cell: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cellvm_cell_seconds", Help: "Time to run a cell, from the request to its result.", Buckets: latencyBuckets,
		}),
		exec: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cellvm_exec_seconds", Help: "Time to run an exec request.", Buckets: latencyBuckets,
		}),
		cells: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellvm_cells_total", Help: "Cells run, by status (ok, error, timeout, lost), killed_by (none, timeout, oom, signal) and language (python, javascript, typescript, bash).",
		}, []string{"status", "killed_by", "language"}),
		boot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cellvm_boot_seconds", Help: "Time from a VM's start to its agent's first answer.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
	}
	w.queued = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cellvm_boot_queue_seconds", Help: "Time a created sandbox's VM waited for a slot to start in (the host bounds the VMs starting at once), before its boot.",
		Buckets: append([]float64{0}, prometheus.ExponentialBuckets(0.05, 2, 12)...),
	})
	reg.MustRegister(w.create, w.cell, w.exec, w.cells, w.boot, w.queued, &stateCollector{m: m, seen: map[string]sandbox.NetworkCounters{}})
	return w
}

// Create implements sandbox.Manager.
func (w *Manager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	start := time.Now()
	info, err := w.Manager.Create(ctx, cfg)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	} else {
		if info.BootMS > 0 {
			w.boot.Observe(float64(info.BootMS) / 1000)
		}
		w.queued.Observe(float64(info.QueuedMS) / 1000)
	}
	w.create.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return info, err
}

// RunCell implements sandbox.Manager. Requests that never became a cell
// (an error) are not cells and are not counted.
func (w *Manager) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	start := time.Now()
	res, err := w.Manager.RunCell(ctx, id, c, onEvent)
	if err == nil {
		w.cell.Observe(time.Since(start).Seconds())
		killed := string(res.KilledBy)
		if killed == "" {
			killed = "none"
		}
		// A cell that ran had a language the manager read: the label
		// is one of cell.Languages, never the caller's spelling.
		lang, _ := cell.ParseLanguage(string(c.Language))
		w.cells.WithLabelValues(string(res.Status), killed, string(lang)).Inc()
	}
	return res, err
}

// Exec implements sandbox.Manager.
func (w *Manager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	start := time.Now()
	res, err := w.Manager.Exec(ctx, id, req)
	if err == nil {
		w.exec.Observe(time.Since(start).Seconds())
	}
	return res, err
}

// stateCollector reads the manager's state at each scrape.
type stateCollector struct {
	m sandbox.Manager

	mu sync.Mutex
	// The egress counters are per sandbox and go when it goes; the totals
	// add each sandbox's growth since the last scrape, so they only rise.
	seen             map[string]sandbox.NetworkCounters
	allowed, dropped uint64
}

var (
	descSandboxes = prometheus.NewDesc("cellvm_sandboxes", "Sandboxes by state.", []string{"state"}, nil)
	descEgress    = prometheus.NewDesc("cellvm_egress_packets_total", "Guest egress packets by verdict (allowed, dropped), as counted by each sandbox's network policy.", []string{"verdict"}, nil)
	descSbUsed    = prometheus.NewDesc("cellvm_host_sandboxes_used", "Sandboxes on this host.", nil, nil)
	descSbFree    = prometheus.NewDesc("cellvm_host_sandboxes_free", "Sandboxes that may still be created (only with a cap).", nil, nil)
	descMemUsed   = prometheus.NewDesc("cellvm_host_memory_mib_used", "Guest memory given to sandboxes, MiB.", nil, nil)
	descMemFree   = prometheus.NewDesc("cellvm_host_memory_mib_free", "Guest memory that may still be given, MiB (only with a cap).", nil, nil)
	descVCPUs     = prometheus.NewDesc("cellvm_host_vcpus_used", "vCPUs given to sandboxes.", nil, nil)
	descBootSlots = prometheus.NewDesc("cellvm_boot_slots", "VMs that may start at once (boots, restores, resumes).", nil, nil)
	descBooting   = prometheus.NewDesc("cellvm_boot_starting", "VMs starting now, each in a slot.", nil, nil)
	descBootLine  = prometheus.NewDesc("cellvm_boot_queue_length", "VM starts waiting for a slot.", nil, nil)
	descBootRefd  = prometheus.NewDesc("cellvm_boot_queue_refused_total", "VM starts refused because the line of starts waiting for a slot was full (503).", nil, nil)
)

var allStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateLost, sandbox.StateStopping}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descEgress, descSbUsed, descSbFree, descMemUsed, descMemFree, descVCPUs,
		descBootSlots, descBooting, descBootLine, descBootRefd} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if list, err := c.m.List(ctx); err == nil {
		byState := map[sandbox.State]int{}
		for _, in := range list {
			byState[in.State]++
		}
		for _, st := range allStates {
			ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(byState[st]), string(st))
		}
		allowed, dropped := c.egress(list)
		ch <- prometheus.MustNewConstMetric(descEgress, prometheus.CounterValue, float64(allowed), "allowed")
		ch <- prometheus.MustNewConstMetric(descEgress, prometheus.CounterValue, float64(dropped), "dropped")
	}
	if cp, err := c.m.Capacity(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(descSbUsed, prometheus.GaugeValue, float64(cp.Sandboxes))
		ch <- prometheus.MustNewConstMetric(descMemUsed, prometheus.GaugeValue, float64(cp.MemoryMiBUsed))
		ch <- prometheus.MustNewConstMetric(descVCPUs, prometheus.GaugeValue, float64(cp.VCPUsUsed))
		if cp.MaxSandboxes > 0 {
			ch <- prometheus.MustNewConstMetric(descSbFree, prometheus.GaugeValue, float64(max(cp.MaxSandboxes-cp.Sandboxes, 0)))
		}
		if cp.MaxMemoryMiB > 0 {
			ch <- prometheus.MustNewConstMetric(descMemFree, prometheus.GaugeValue, float64(max(cp.MaxMemoryMiB-cp.MemoryMiBUsed, 0)))
		}
		if b := cp.Boots; b != nil {
			ch <- prometheus.MustNewConstMetric(descBootSlots, prometheus.GaugeValue, float64(b.Slots))
			ch <- prometheus.MustNewConstMetric(descBooting, prometheus.GaugeValue, float64(b.Starting))
			ch <- prometheus.MustNewConstMetric(descBootLine, prometheus.GaugeValue, float64(b.Waiting))
			ch <- prometheus.MustNewConstMetric(descBootRefd, prometheus.CounterValue, float64(b.Refused))
		}
	}
}

// egress adds each sandbox's growth since the last scrape to the totals.
func (c *stateCollector) egress(list []sandbox.Info) (uint64, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := map[string]sandbox.NetworkCounters{}
	for _, in := range list {
		prev := c.seen[in.ID]
		cur := in.Network
		c.allowed += growth(prev.AllowedPackets, cur.AllowedPackets)
		c.dropped += growth(prev.DroppedPackets, cur.DroppedPackets)
		now[in.ID] = cur
	}
	c.seen = now
	return c.allowed, c.dropped
}

// growth is how much a counter grew; one that went down was reset, and
// all of its new value is growth.
func growth(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// Unwrap implements sandbox.Wrapper.
func (w *Manager) Unwrap() sandbox.Manager { return w.Manager }
