package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/faultproxy"
)

// logWriter puts the soak's output in the test log, a line at a time.
type logWriter struct {
	mu  sync.Mutex
	t   *testing.T
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// The short soak, on every push: three keepnode processes on versitygw
// through the fault proxies, soak actors of every behaviour, at least ten
// SIGKILLs and a cut from the bucket, every kind of S3 fault; then the
// whole history is checked: nothing lost, none early, every acknowledged
// exec-durable request committed, retries on time, deleted actors silent,
// the index doctor clean. make soak is the long run.
func TestShortSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the short soak takes about two minutes")
	}
	o := defaults()
	// The fault mix and bounds this test has always run with; make soak
	// runs the defaults.
	for m, r := range map[faultproxy.FailMode]float64{
		faultproxy.Respond503: 0.02, faultproxy.Drop: 0.005, faultproxy.DropAfterForward: 0.01,
		faultproxy.Reset: 0.005, faultproxy.LandLate: 0.005,
	} {
		*o.faults[m] = r
	}
	o.boundInFaults = false
	o.actors = 300
	o.kills = 10
	o.killEvery = 3 * time.Second
	o.leaseTTL, o.margin, o.grace, o.sweep = 3*time.Second, time.Second, 1500*time.Millisecond, 1500*time.Millisecond
	o.minInt, o.maxInt = 8*time.Second, 30*time.Second
	o.partition = 0.25
	o.rate = 20
	o.quiet = 10 * time.Second
	o.seed = 13 // its chaos steps include cuts
	o.out = &logWriter{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sum, err := run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Violations > 0 {
		t.Fatalf("%d violations (each actor's history is in the log above)", sum.Violations)
	}
	if sum.Kills < 10 || sum.Cuts < 1 {
		t.Fatalf("%d kills and %d cuts; want at least 10 and 1", sum.Kills, sum.Cuts)
	}
	for _, m := range faultproxy.Modes {
		if sum.Injected[m.String()] == 0 {
			t.Errorf("no %q fault injected: %v", m, sum.Injected)
		}
	}
	if sum.Committed < o.actors || sum.Acked == 0 {
		t.Fatalf("%d firings committed and %d requests acknowledged: the soak hardly ran", sum.Committed, sum.Acked)
	}
	// The runs the guests said are the count of duplicates: every
	// committed firing must be among them.
	if sum.Unseen > 0 || sum.Runs < sum.Committed {
		t.Fatalf("%d runs said, %d committed firings, %d of them with no run said: the guests' lines are not all read",
			sum.Runs, sum.Committed, sum.Unseen)
	}
}
