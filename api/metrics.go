package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// WithMetrics makes the server count its requests in reg and serve reg's
// metrics (the sandbox manager's among them, when the daemon registered
// them there) at GET /metrics. Without it the server keeps a registry of
// its own with only the request metrics.
func WithMetrics(reg *prometheus.Registry) Option {
	return func(s *server) { s.registry = reg }
}

// requestMetrics counts API requests by route pattern and status code.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellvm_api_requests_total",
			Help: "API requests answered, by route (the route table's pattern, or \"unrouted\") and HTTP status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellvm_api_request_duration_seconds",
			Help:    "Time to answer an API request, by route (streams count until they end).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *requestMetrics) observe(r *http.Request, status int, took time.Duration) {
	route := r.Pattern
	if route == "" {
		route = "unrouted"
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
}

func (s *server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// metrics: GET /metrics in the Prometheus text format.
func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	s.promHandler.ServeHTTP(w, r)
}
