package main

// The bucket outage (-outage): once, in the middle of the faults, every
// node's proxy fails every S3 request for the outage's length, a third of
// it in each way (requests hung, connections reset, 503s), with the client
// load going on. Kills and the random faults pause from before it (every
// node up, a window measured as "before") to the end of a recovery window
// after it, so that what is measured is the outage's: the nodes' S3
// request rate, their RSS, the client requests answered during it, and the
// actors restored from the bucket after it. The checker holds every alarm
// the outage held up to lease + grace + two sweeps + slack per attempt
// from the bucket's return.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/faultproxy"
)

// outageReport is what the soak measured around the outage.
type outageReport struct {
	// PausedMs and ResumedMs bound the pause of kills and faults; StartMs
	// and EndMs the outage itself.
	PausedMs, StartMs, EndMs, ResumedMs int64
	// Before, Phases and After are the S3 requests through the proxies
	// (all nodes, connections reset as they opened included) in the
	// window before the outage, in each of its phases, and in the
	// recovery after it.
	Before, After span
	Phases        []span
	// AfterByArea are the recovery's requests by faultproxy.Area.
	AfterByArea map[string]int
	// PerSecond are the requests in each second of the outage.
	PerSecond []int
	// RSS is each node's VmRSS in KiB: before the outage, the highest
	// during it, and at the end of the recovery.
	RSS []nodeRSS
	// Restores, GivenUp and Taken are the nodes' wasmkeep_actor_restores_total,
	// wasmkeep_node_actors_given_up_total and wasmkeep_holds_taken_total
	// from the outage's start to the end of the recovery (summed); Scrape
	// says why they could not be read, if so.
	Restores, GivenUp, Taken float64
	// Refused and RefusedWatched are the nodes'
	// wasmkeep_hold_takes_refused_total over the same span: takes that
	// read an actor's record and found its holder live, by reading its
	// lease (lease="read", two GETs each) or on their own readings of the
	// leases (lease="watched", one GET each).
	Refused, RefusedWatched float64
	Scrape                  string
	// Probe is the bucket's rate of a firing's requests through the
	// proxies, measured before the nodes started (probeBucket).
	Probe probeResult
}

// net is the recovery window's requests net of the rate before the
// outage (the client load and the nodes' background, which went on):
// what the recovery itself sent.
func (r *outageReport) net() float64 {
	return max(0, float64(r.After.Requests)-r.Before.rate()*float64(r.After.Ms)/1000)
}

// backlogMs is how long the bucket, at the probed rate, takes to serve
// the recovery's own requests (net): the allowance the bound of an alarm
// the outage held up gets for the backlog (0 without a probe).
func (r *outageReport) backlogMs() int64 {
	if rate := r.Probe.rate(); rate > 0 {
		return int64(1000 * r.net() / rate)
	}
	return 0
}

// span is requests over a stretch of time.
type span struct {
	Name     string
	Requests int
	Ms       int64
}

func (s span) rate() float64 { return perSecond(s.Requests, s.Ms) }

type nodeRSS struct {
	Node                string
	Before, Peak, After int64
	BeforeOK, AfterOK   bool
}

// proxyTotal is the S3 requests every proxy has received, with the
// connections an outage reset before a request was read.
func (s *soak) proxyTotal() int {
	n := 0
	for _, sl := range s.slots {
		n += sl.proxy.Count("") + sl.proxy.Injected()["outage refused connection"]
	}
	return n
}

// proxyAreas sums every proxy's requests by faultproxy.Area.
func (s *soak) proxyAreas() map[string]int {
	out := map[string]int{}
	for _, sl := range s.slots {
		for k, v := range sl.proxy.ByArea() {
			out[k] += v
		}
	}
	return out
}

// vmRSS reads a process's resident set size in KiB from /proc.
func vmRSS(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb, err == nil
		}
	}
	return 0, false
}

// nodes returns the running nodes, slot by slot (nil where none runs).
func (s *soak) nodes() []*clusterproc.Node {
	out := make([]*clusterproc.Node, len(s.slots))
	for i, sl := range s.slots {
		sl.mu.Lock()
		out[i] = sl.node
		sl.mu.Unlock()
	}
	return out
}

// scrape sums the named counters over the running nodes' metrics.
func (s *soak) scrape(ctx context.Context, names ...string) (map[string]float64, error) {
	sum := map[string]float64{}
	for _, nd := range s.nodes() {
		if nd == nil || nd.MetricsURL == "" {
			return nil, fmt.Errorf("a node without metrics")
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, nd.MetricsURL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			return nil, err
		}
		sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), " ")
			if ok && slices.Contains(names, name) {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err == nil {
					sum[name] += f
				}
			}
		}
		resp.Body.Close()
		cancel()
	}
	return sum, nil
}

const (
	metricRestores = "wasmkeep_actor_restores_total"
	metricGivenUp  = "wasmkeep_node_actors_given_up_total"
	metricTaken    = "wasmkeep_holds_taken_total"
	metricRefused  = `wasmkeep_hold_takes_refused_total{lease="read"}`
	metricWatched  = `wasmkeep_hold_takes_refused_total{lease="watched"}`
)

// outageRun pauses kills and faults, brings every node up, and runs the
// outage with the recovery after it, recording outageRep.
func (s *soak) outageRun(ctx context.Context) {
	o := s.o
	rep := &outageReport{PausedMs: time.Now().UnixMilli(), Probe: s.probe}
	s.say("outage: kills and faults paused; every node up first")
	if err := s.calm(ctx); err != nil {
		s.say("outage: %v", err)
	}
	window := o.leaseTTL + o.grace + 2*o.sweep + o.slack + 5*time.Second
	t0, n0 := time.Now(), s.proxyTotal()
	time.Sleep(window)
	rep.Before = span{Name: "before", Requests: s.proxyTotal() - n0, Ms: time.Since(t0).Milliseconds()}
	nodes := s.nodes()
	rep.RSS = make([]nodeRSS, len(nodes))
	for i, nd := range nodes {
		if nd != nil {
			rep.RSS[i].Before, rep.RSS[i].BeforeOK = vmRSS(nd.Pid())
		}
		s.slots[i].mu.Lock()
		rep.RSS[i].Node = s.slots[i].name
		s.slots[i].mu.Unlock()
	}
	m0, err := s.scrape(ctx, metricRestores, metricGivenUp, metricTaken, metricRefused, metricWatched)
	if err != nil {
		rep.Scrape = err.Error()
	}

	rep.StartMs = time.Now().UnixMilli()
	s.say("outage: every S3 request fails for %v (hung, then connections reset, then 503)", o.outage)
	phaseLen := o.outage / 3
	last := s.proxyTotal()
	for i, kind := range []faultproxy.Outage{faultproxy.OutageCut, faultproxy.OutageRefused, faultproxy.Outage503} {
		for _, sl := range s.slots {
			sl.proxy.SetOutage(kind)
		}
		ps, pn := time.Now(), s.proxyTotal()
		length := phaseLen
		if i == 2 {
			length = o.outage - 2*phaseLen
		}
		end := ps.Add(length)
		for next := ps.Add(time.Second); ; next = next.Add(time.Second) {
			if next.After(end) {
				time.Sleep(time.Until(end))
				break
			}
			time.Sleep(time.Until(next))
			n := s.proxyTotal()
			rep.PerSecond = append(rep.PerSecond, n-last)
			last = n
			for j, nd := range nodes {
				if nd == nil {
					continue
				}
				if kb, ok := vmRSS(nd.Pid()); ok && kb > rep.RSS[j].Peak {
					rep.RSS[j].Peak = kb
				}
			}
		}
		rep.Phases = append(rep.Phases, span{Name: kind.String(), Requests: s.proxyTotal() - pn, Ms: time.Since(ps).Milliseconds()})
	}
	for _, sl := range s.slots {
		sl.proxy.SetOutage(faultproxy.NoOutage)
	}
	rep.EndMs = time.Now().UnixMilli()
	s.say("outage over: the bucket answers again; kills and faults resume in %v", window)

	t1, n1, a1 := time.Now(), s.proxyTotal(), s.proxyAreas()
	time.Sleep(window)
	rep.After = span{Name: "after", Requests: s.proxyTotal() - n1, Ms: time.Since(t1).Milliseconds()}
	rep.AfterByArea = map[string]int{}
	for k, v := range s.proxyAreas() {
		if d := v - a1[k]; d > 0 {
			rep.AfterByArea[k] = d
		}
	}
	for i, nd := range nodes {
		if nd != nil {
			rep.RSS[i].After, rep.RSS[i].AfterOK = vmRSS(nd.Pid())
		}
	}
	if m1, err := s.scrape(ctx, metricRestores, metricGivenUp, metricTaken, metricRefused, metricWatched); err != nil {
		rep.Scrape = err.Error()
	} else if m0 != nil {
		rep.Restores, rep.GivenUp, rep.Taken = m1[metricRestores]-m0[metricRestores], m1[metricGivenUp]-m0[metricGivenUp], m1[metricTaken]-m0[metricTaken]
		rep.Refused, rep.RefusedWatched = m1[metricRefused]-m0[metricRefused], m1[metricWatched]-m0[metricWatched]
	}
	s.setFaults(true)
	rep.ResumedMs = time.Now().UnixMilli()
	s.outageRep = rep
}

// outageTable prints the outage's lines of the summary.
func (s *soak) outageTable(w io.Writer, sum summary, bd bounds) {
	ou := sum.Outage
	if ou == nil {
		return
	}
	var phases []string
	for _, p := range ou.Phases {
		phases = append(phases, fmt.Sprintf("%s %s", msText(p.Ms), p.Name))
	}
	fmt.Fprintf(w, "  bucket outage:         %s at +%s (%s); kills and faults paused %s before it and %s after it\n",
		msText(ou.EndMs-ou.StartMs), msText(ou.StartMs-s.start.UnixMilli()), strings.Join(phases, ", "),
		msText(ou.StartMs-ou.PausedMs), msText(ou.ResumedMs-ou.EndMs))
	var rates []string
	for _, p := range ou.Phases {
		rates = append(rates, fmt.Sprintf("%s %.1f", p.Name, p.rate()))
	}
	first, lastTen := 0, 0
	n := len(ou.PerSecond)
	for i, c := range ou.PerSecond {
		if i < 10 {
			first += c
		}
		if i >= n-10 {
			lastTen += c
		}
	}
	fmt.Fprintf(w, "  S3 requests/s:         %.1f before; during the outage %s (first 10s %.1f, last 10s %.1f, busiest second %d); %.1f after (all nodes, through the proxies)\n",
		ou.Before.rate(), strings.Join(rates, ", "), float64(first)/float64(min(n, 10)), float64(lastTen)/float64(min(n, 10)), slices.Max(append([]int{0}, ou.PerSecond...)), ou.After.rate())
	if len(ou.AfterByArea) > 0 {
		areas := make([]string, 0, len(ou.AfterByArea))
		for k := range ou.AfterByArea {
			areas = append(areas, k)
		}
		slices.SortFunc(areas, func(a, b string) int { return ou.AfterByArea[b] - ou.AfterByArea[a] })
		var parts []string
		for _, k := range areas {
			parts = append(parts, fmt.Sprintf("%s %d", k, ou.AfterByArea[k]))
		}
		fmt.Fprintf(w, "  S3 requests after:     %s (the recovery window, by operation and key folder)\n", strings.Join(parts, ", "))
	}
	var rss []string
	mib := func(kb int64, ok bool) string {
		if !ok {
			return "?"
		}
		return fmt.Sprintf("%.0f", float64(kb)/1024)
	}
	for _, r := range ou.RSS {
		rss = append(rss, fmt.Sprintf("%s %s/%s/%s", r.Node, mib(r.Before, r.BeforeOK), mib(r.Peak, r.Peak > 0), mib(r.After, r.AfterOK)))
	}
	fmt.Fprintf(w, "  RSS MiB:               %s (before / highest during / after)\n", strings.Join(rss, ", "))
	for _, kind := range []string{kindExecDurable, kindExec, "delete"} {
		c := sum.OutageRequests[kind]
		if c == nil {
			continue
		}
		first := "-"
		if n := len(c.FirstMs); n > 0 {
			first = fmt.Sprintf("p50 %s, p99 %s, max %s", pctText(c.FirstMs, 50), pctText(c.FirstMs, 99), msText(c.FirstMs[n-1]))
		}
		last := "-"
		if n := len(c.FailedMs); n > 0 {
			last = fmt.Sprintf("p50 %s, max %s", pctText(c.FailedMs, 50), msText(c.FailedMs[n-1]))
		}
		fmt.Fprintf(w, "  %-22s %d sent during the outage, first tries answered in %s; %d tries again, %d succeeded in the end (%d answered from their key's record);\n"+
			"                         %d failed in the end (after %s): %d with Retry-After, %d without a reply\n",
			kind+" in outage:", c.Sent, first, c.Retries, c.Sent-c.Failed, c.Replayed, c.Failed, last, c.RetryAfter, c.NoReply)
		printCauses(w, c.Causes, 3)
	}
	held := "-"
	if n := len(sum.AfterOutage); n > 0 {
		held = fmt.Sprintf("p50 %s, p99 %s, max %s", pctText(sum.AfterOutage, 50), pctText(sum.AfterOutage, 99), msText(sum.AfterOutage[n-1]))
	}
	fmt.Fprintf(w, "  after the outage:      %d firings it held up ran %s after the bucket returned; %d past their bound (%s per attempt: lease + grace + 2 x sweep + slack, and %s for the backlog on the first)\n",
		len(sum.AfterOutage), held, sum.LateAfterOutage, msText(bd.OutageAlarm), msText(bd.OutageBacklog))
	if p := ou.Probe; p.Err != "" {
		fmt.Fprintf(w, "  bucket probe:          did not run: %s\n", p.Err)
	} else {
		fmt.Fprintf(w, "  bucket probe:          %.1f requests/s through the proxies before the nodes started (%d workers, a firing's mix: snapshot PUT, entry PUT, record GET and conditional PUT; %d answered in %s, %d failed)\n",
			p.rate(), probeWorkers, p.Requests, msText(p.Ms), p.Errors)
	}
	perFiring := "-"
	if n := len(sum.AfterOutage); n > 0 {
		perFiring = fmt.Sprintf("%.2f", ou.net()/float64(n))
	}
	refusedShare := 0.0
	if ou.After.Requests > 0 {
		refusedShare = 100 * (2*ou.Refused + ou.RefusedWatched) / float64(ou.After.Requests)
	}
	fmt.Fprintf(w, "  recovery requests:     %d in the window, %.0f net of the rate before it (client load and background): %s per held-up firing; takes refused: %.0f on a read of the lease (2 GETs each), %.0f on the nodes' own readings (1 GET each), %.1f%% of the window's requests\n",
		ou.After.Requests, ou.net(), perFiring, ou.Refused, ou.RefusedWatched, refusedShare)
	if ou.Scrape != "" {
		fmt.Fprintf(w, "                         restores not read: %s\n", ou.Scrape)
	} else {
		fmt.Fprintf(w, "                         from the outage's start to the recovery's end: %.0f actors restored from the bucket (snapshots downloaded), %.0f given up, %.0f holds taken\n",
			ou.Restores, ou.GivenUp, ou.Taken)
	}
}
