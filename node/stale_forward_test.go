package node_test

// A stale index entry of an actor held by a node that walks none of its
// tenant (docs/design.md#stale-forward): since a tenant is listed only by
// its walkers, the holder never meets the entry, and a walker's delivery
// of it finds the actor held elsewhere. The walker forwards it to the
// holder (POST .../alarm:offer), which removes it. Three real nodes on
// versitygw, forwarding over HTTP.

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
	"github.com/wasmkeep/alarms/sweeper"
)

// opLog is one node's view of the shared bucket: it logs each request
// (method and key or prefix) that node sends.
type opLog struct {
	bucket.Bucket
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(op string) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

func (l *opLog) Get(ctx context.Context, key string) ([]byte, string, error) {
	l.add("GET " + key)
	return l.Bucket.Get(ctx, key)
}

func (l *opLog) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	l.add("PUT " + key)
	return l.Bucket.Put(ctx, key, body, cond)
}

func (l *opLog) Delete(ctx context.Context, key string) error {
	l.add("DELETE " + key)
	return l.Bucket.Delete(ctx, key)
}

func (l *opLog) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	l.add("DELETEBATCH " + strings.Join(keys, " "))
	return l.Bucket.DeleteBatch(ctx, keys)
}

func (l *opLog) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	l.add("LIST " + prefix)
	return l.Bucket.List(ctx, prefix, startAfter, limit)
}

// since returns the requests logged from mark on that start with one of
// the prefixes.
func (l *opLog) since(mark int, prefixes ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, op := range l.ops[mark:] {
		for _, p := range prefixes {
			if strings.HasPrefix(op, p) {
				out = append(out, op)
				break
			}
		}
	}
	return out
}

func (l *opLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ops)
}

// fwdNode is a cluster node served over HTTP on the loopback, its bucket
// requests logged, its offers received counted.
type fwdNode struct {
	*node.Node
	name   string
	log    *opLog
	offers atomic.Int64 // POST .../alarm:offer received
	dels   *ixDeliveries
}

// fwdTiming: a 3 s lease, 1 s grace (a sweep margin of 4 s), a sweep
// every 200 ms.
const (
	fwdTTL    = 3 * time.Second
	fwdGrace  = time.Second
	fwdMargin = fwdTTL + fwdGrace
	fwdSweep  = 200 * time.Millisecond
)

func startFwdNode(t *testing.T, b bucket.Bucket, name string, deleteWindow time.Duration) *fwdNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fwdNode{name: name, log: &opLog{Bucket: b}, dels: &ixDeliveries{}}
	n, err := node.New(context.Background(), node.Config{
		DataDir: t.TempDir(), Classes: ixClasses(t, oneshotClass), OnDelivery: f.dels.add,
		Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}}),
		Cluster: &node.ClusterConfig{
			Bucket: f.log, NodeID: name, Addr: ln.Addr().String(),
			LeaseTTL: fwdTTL, LeaseMargin: time.Second, LeaseGrace: fwdGrace,
			SweepPeriod: fwdSweep, IdleTimeout: time.Hour, Tenants: []string{"t"},
			DeleteWindow: deleteWindow,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.Node = n
	h := n.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/alarm:offer") {
			f.offers.Add(1)
		}
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	n.Start(context.Background())
	t.Cleanup(func() { srv.Close(); n.Close(context.Background()) })
	return f
}

// The node that replaced an entry dies with its batched DELETE unsent; a
// node that is none of the tenant's two walkers takes the actor over and
// holds it (its alarm an hour ahead). The replaced entry is stale, and the
// holder never lists the tenant. A walker lists it once it is a margin
// overdue and, its delivery finding the actor held, forwards it to the
// holder, which removes it (the design's bound, two margins, two sweeps
// and a lease after it is a margin overdue, is the simulator's to check in
// simulated time; here it is logged). The forward's cost is
// exact: one POST .../alarm:offer, and on the holder one LIST of the actor's
// entries at that time and one DELETE, plus, for a holder that has not
// uploaded the actor since it took it (as a node that restarted), the
// fence's one upload. on-alarm never runs for it, and the entry the state
// names stays.
func TestAStaleEntryOfAnActorHeldByANodeThatIsNoWalkerIsForwardedAndRemoved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		uploaded bool // the holder took the actor with a request (else by reading its state)
	}{{"the holder uploaded the actor", true}, {"the holder has not uploaded it yet", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := s3test.Start(t).Bucket
			// p replaces the entry and dies; of the three that stay, the
			// holder is none of tenant t's two walkers.
			names := []string{"p", "a", "b", "c"}
			var v sweeper.View
			for _, n := range names[1:] {
				v.Members = append(v.Members, sweeper.Member{Addr: n, Classes: []string{oneshotClass}})
			}
			walkers := sweeper.NewWalkers(v, 0).Of("t", oneshotClass)
			var holderName string
			for _, n := range names[1:] {
				if !slices.Contains(walkers, n) {
					holderName = n
				}
			}
			// p's batch of DELETEs waits an hour: it is lost when p dies.
			p := startFwdNode(t, b, "p", time.Hour)
			nodes := map[string]*fwdNode{"p": p}
			for _, n := range names[1:] {
				nodes[n] = startFwdNode(t, b, n, 0)
			}
			h := nodes[holderName]
			waitFor(t, "every node to see the others", func() bool {
				for _, n := range nodes {
					if len(n.Leases().Live()) != len(names) {
						return false
					}
				}
				return true
			})

			id := ixOneshot("fwd")
			// t1 comes a margin overdue only after the holder took the
			// actor over (p's lease expires TTL + grace after it dies),
			// so that no walker takes it over first.
			t1 := time.Now().Add(10 * time.Second).UnixMilli()
			t2 := time.Now().Add(time.Hour).UnixMilli()
			ixSet(t, b, p.Node, id, node.ExecDurable, t1)
			// Replaces the entry at t1, whose DELETE waits in the batch.
			if _, err := p.Exec(ctx, id, setBody(t2), node.ExecDurable); err != nil {
				t.Fatal(err)
			}
			var stale alarmindex.Key
			for _, k := range ixEntries(t, b, id) {
				if k.DueMs == t1 {
					stale = k
				}
			}
			if stale.DueMs == 0 {
				t.Fatalf("no entry at t1 in the index: %v", ixEntries(t, b, id))
			}
			_, named := ixNamed(t, b, id)
			p.Crash()

			// The holder takes the actor once p's lease has expired.
			waitFor(t, "the holder to take the actor over", func() bool {
				var err error
				if tc.uploaded {
					_, err = h.Exec(ctx, id, setBody(t2), node.ExecDurable)
				} else {
					_, err = h.State(ctx, id)
				}
				return err == nil
			})
			mark := h.log.mark()
			if tc.uploaded {
				// The event changed nothing of the alarm: no index request.
				if got := h.log.since(0, "PUT "+ixRoot, "DELETE "+ixRoot); len(got) != 0 {
					t.Fatalf("the holder's event wrote the index: %v", got)
				}
			}

			// Removed: the design's bound is two margins, two sweeps and a
			// lease after it is a margin overdue, which the simulator
			// checks in simulated time (sim: the stale-entry bound); on
			// this shared machine's clock the test waits far longer before
			// it calls the entry stuck, and logs how long it took.
			bound := fwdMargin + 2*fwdMargin + 2*fwdSweep + fwdTTL
			stuck := time.UnixMilli(t1).Add(10 * bound)
			for ixExists(t, b, stale.String()) {
				if time.Now().After(stuck) {
					t.Fatalf("the stale entry %s is still in the index %v after it was due (ten times the design's bound of %v); offers received by the holder: %d",
						stale, time.Since(time.UnixMilli(t1)).Round(time.Millisecond), bound, h.offers.Load())
				}
				time.Sleep(20 * time.Millisecond)
			}
			took := time.Since(time.UnixMilli(t1))
			time.Sleep(3 * fwdSweep) // anything the removal set off has happened
			if !ixExists(t, b, named.String()) {
				t.Fatalf("the entry the state names, %s, was removed", named)
			}

			var offers int64
			for _, n := range nodes {
				if n == p {
					continue
				}
				if n != h {
					offers += n.offers.Load()
				}
			}
			entriesAtT1 := ixPrefix + alarmindex.TaggedPrefix(id, t1)
			lists := h.log.since(mark, "LIST "+ixRoot)
			deletes := h.log.since(mark, "DELETE "+ixRoot, "DELETEBATCH "+ixRoot)
			uploads := h.log.since(mark, "PUT cluster/state/")
			t.Logf("removed %v after it was due (the design's bound: %v); offers %d (holder), %d (others); holder: LIST %v, DELETE %v, uploads %v",
				took.Round(time.Millisecond), bound, h.offers.Load(), offers, lists, deletes, uploads)
			if got := h.offers.Load(); got != 1 || offers != 0 {
				t.Errorf("offers: %d to the holder, %d to other nodes; want exactly 1, to the holder", got, offers)
			}
			if len(lists) != 1 || !strings.HasPrefix(lists[0], "LIST "+entriesAtT1) {
				t.Errorf("the holder's LISTs of the index: %v; want one, of the actor's entries at t1 (%s)", lists, entriesAtT1)
			}
			if len(deletes) != 1 || deletes[0] != "DELETE "+ixPrefix+stale.String() {
				t.Errorf("the holder's DELETEs of the index: %v; want one, of %s", deletes, stale)
			}
			wantUploads := 0
			if !tc.uploaded {
				wantUploads = 1 // the fence
			}
			if len(uploads) != wantUploads {
				t.Errorf("the holder's uploads: %v; want %d", uploads, wantUploads)
			}
			for _, n := range nodes {
				if n == p {
					continue
				}
				for _, ev := range n.dels.of(id) {
					if ev.Event.Ran {
						t.Errorf("%s ran on-alarm for %s: %+v", n.name, id, ev)
					}
				}
			}
			// The holder still holds the actor, its alarm armed at t2.
			if st, err := h.State(ctx, id); err != nil || st.Alarm == nil || *st.Alarm != t2 {
				t.Errorf("the holder's state after the removal: %+v, %v; want the alarm at t2", st, err)
			}
		})
	}
}
