package node

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpUnmatched is the route label of a request no route matched (answered
// 404 or 405).
const httpUnmatched = "unmatched"

// httpDurationBuckets run from a warm event (a fraction of a millisecond)
// to a request that waited out a failover (Config.Cluster.FailoverWait).
var httpDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// httpMetrics count the HTTP API's requests by route pattern and status.
// Both labels are bounded: the routes are the handler's patterns (and
// "unmatched"), never a path; the codes are those the API answers.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_http_requests_total",
			Help: "Requests of the HTTP API, by route pattern (\"unmatched\" for none) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmkeep_http_request_duration_seconds",
			Help:    "How long the HTTP API took to answer, by route pattern and status code (a forwarded request's time includes the holder's).",
			Buckets: httpDurationBuckets,
		}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// instrument counts and times each request h serves, labelled with the
// pattern of mux that matches it. Without metrics it returns h.
func (n *Node) instrument(mux *http.ServeMux, h http.Handler) http.Handler {
	m := n.obs.http
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		route := httpUnmatched
		if _, p := mux.Handler(r); p != "" {
			route = p
		}
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			code := sw.status
			if code == 0 {
				code = http.StatusOK // a handler that wrote nothing
			}
			c := strconv.Itoa(code)
			m.requests.WithLabelValues(route, c).Inc()
			m.duration.WithLabelValues(route, c).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}

// statusWriter records the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (flushes, deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
