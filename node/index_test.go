package node_test

// Host-level tests of the alarm index (docs/design.md): the owner keeps the index
// equal to the committed alarm, the requests it costs, the rules that make
// late deletes harmless (R1-R3), R4 for a node that joins with its own data,
// and the ways a node gives an actor up. Tests that need no fault run on
// versitygw (and on the in-memory bucket); those that need one use the
// in-memory bucket's fault hooks, or a proxy in front of versitygw.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// The index tests' classes: the scripted guest, for tests that need events
// other than setting an alarm, and the oneshot_alarm fixture (on-request
// sets the alarm to the request's 8 bytes; on-alarm returns 0), which
// compiles in a moment.
const (
	ixClass      = "scripted"
	oneshotClass = "oneshot"
)

func ixActor(name string) abi.ActorID {
	return abi.ActorID{Tenant: "t", Class: ixClass, Name: name}
}

func ixOneshot(name string) abi.ActorID {
	return abi.ActorID{Tenant: "t", Class: oneshotClass, Name: name}
}

// ixClasses returns the classes a node of the test serves.
func ixClasses(t *testing.T, class string) map[string][]byte {
	if class == oneshotClass {
		return map[string][]byte{oneshotClass: testguest.Fixture(t, "oneshot_alarm")}
	}
	return map[string][]byte{ixClass: testguest.Build(t, testguest.Scripted)}
}

// ixConfig is what an index test varies about a cluster node.
type ixConfig struct {
	retryMax time.Duration // node.Config.RetryMax (default 5 min)
	// retryAfterError is node.Config.RetryAfterError (default 5 s; a failed
	// delivery is retried after at least the lease TTL).
	retryAfterError time.Duration
	log             *ixDeliveries         // records the node's deliveries
	noStart         bool                  // do not run the timer, the reaper and the sweeps
	class           string                // the class served: ixClass (default) or oneshotClass
	classes         map[string][]byte     // the classes served, if not class
	tenants         []string              // the tenants swept (default "t")
	registerer      prometheus.Registerer // the node's metrics (default none)
	// steady uses a 3 s lease (margin 1 s, grace 1 s) for tests that wait
	// for no takeover and no sweep, so that a busy machine cannot make the
	// lease lapse; the default is 600 ms (150 ms, 300 ms).
	steady bool
	// safety is the sweep's safety period (default 10 min).
	safety time.Duration
}

// ixNode starts a cluster node on b with short lease timings (TTL 600 ms,
// unless steady) and a sweep every 200 ms; it is closed when the test ends.
func ixNode(t *testing.T, b bucket.Bucket, name, dir string, c ixConfig) *node.Node {
	t.Helper()
	var onDelivery func(node.DeliveryEvent)
	if c.log != nil {
		onDelivery = c.log.add
	}
	ttl, margin, grace := 600*time.Millisecond, 150*time.Millisecond, 300*time.Millisecond
	if c.steady {
		ttl, margin, grace = 3*time.Second, time.Second, time.Second
	}
	classes, tenants := c.classes, c.tenants
	if classes == nil {
		classes = ixClasses(t, c.class)
	}
	if tenants == nil {
		tenants = []string{"t"}
	}
	n, err := node.New(context.Background(), node.Config{
		DataDir: dir, Classes: classes,
		OnDelivery: onDelivery, RetryMax: c.retryMax, RetryAfterError: c.retryAfterError,
		Registerer: c.registerer,
		Logger:     hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}}),
		Cluster: &node.ClusterConfig{
			Bucket: b, NodeID: name, Addr: name + ".invalid:1",
			LeaseTTL: ttl, LeaseMargin: margin, LeaseGrace: grace,
			SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Hour, Tenants: tenants,
			SweepSafetyPeriod: c.safety,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !c.noStart {
		n.Start(context.Background())
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// ixBuckets runs f on an in-memory bucket and on a fresh versitygw bucket.
func ixBuckets(t *testing.T, f func(t *testing.T, b bucket.Bucket)) {
	t.Run("mem", func(t *testing.T) { f(t, bucket.NewMem()) })
	t.Run("s3", func(t *testing.T) { f(t, s3test.Start(t).Bucket) })
}

// ixEvent runs a request event and, for Exec, waits until its background
// replication finished: a newer snapshot is in the bucket, and State (which
// takes the actor's lock and costs no request while the node holds it)
// returns after the replaced entry's DELETE is queued, which it then sends.
// b may be nil for ExecDurable.
func ixEvent(t *testing.T, b bucket.Bucket, n *node.Node, id abi.ActorID, kind node.EventKind, body []byte) []byte {
	t.Helper()
	var before cluster.Snapshot
	if kind == node.Exec {
		before = latestOrZero(t, b, id)
	}
	r, err := n.Exec(context.Background(), id, body, kind)
	if err != nil {
		t.Fatalf("%q on actor %s: %v", body, id, err)
	}
	if kind == node.Exec {
		waitFor(t, "the event replicated", func() bool { return latestOrZero(t, b, id) != before })
		if _, err := n.State(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	// The replaced entry's DELETE waits for its batch: send it now.
	n.FlushDeletes(context.Background())
	return r.Response
}

// ixRun runs a request of the scripted guest with ixEvent and fails the
// test unless the guest answers "ok" (or anything, for "get" and "getkv").
func ixRun(t *testing.T, b bucket.Bucket, n *node.Node, id abi.ActorID, kind node.EventKind, req string) string {
	t.Helper()
	out := string(ixEvent(t, b, n, id, kind, []byte(req)))
	if !strings.HasPrefix(req, "get") && out != "ok" {
		t.Fatalf("%q on actor %s: the guest answered %q", req, id, out)
	}
	return out
}

// ixSet sets the actor's alarm with ixEvent, in the request its class
// understands.
func ixSet(t *testing.T, b bucket.Bucket, n *node.Node, id abi.ActorID, kind node.EventKind, ms int64) {
	t.Helper()
	if id.Class == oneshotClass {
		ixEvent(t, b, n, id, kind, setBody(ms))
		return
	}
	ixRun(t, b, n, id, kind, "set "+strconv.FormatInt(ms, 10))
}

// setBody is the request that sets a oneshot actor's alarm.
func setBody(ms int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(ms)) }

// ixSpy is the bucket the nodes of a test use. It counts the index requests
// they make (PUT and DELETE under alarms/), logs the mutations that
// succeeded in order, and checks every uploaded snapshot: one that holds an
// alarm must name an entry at the alarm's time that exists when the
// snapshot is sent. Its own reads go to the wrapped bucket directly and are
// not counted.
type ixSpy struct {
	bucket.Bucket
	dir string

	mu         sync.Mutex
	puts, dels int      // index PUTs, and index keys deleted (alone or in batches)
	single     int      // index keys deleted by single-key DELETE requests
	log        []string // "PUT key" and "DELETE key", as they succeeded
	bad        []string // snapshots that named no existing entry
	n          int
}

func newIxSpy(t *testing.T, b bucket.Bucket) *ixSpy {
	return &ixSpy{Bucket: b, dir: t.TempDir()}
}

func (s *ixSpy) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	if strings.HasPrefix(key, ixRoot) {
		s.mu.Lock()
		s.puts++
		s.mu.Unlock()
	}
	if strings.HasPrefix(key, "cluster/state/") && len(body) > 0 {
		s.check(ctx, key, body)
	}
	etag, err := s.Bucket.Put(ctx, key, body, cond)
	if err == nil {
		entry := "PUT " + key
		if strings.HasPrefix(key, "cluster/state/") {
			// A hold's uploads share one key: the ETag tells them apart.
			entry += " " + etag
		}
		s.mu.Lock()
		s.log = append(s.log, entry)
		s.mu.Unlock()
	}
	return etag, err
}

// ixPut is how the spy logs the upload of snapshot s.
func ixPut(s cluster.Snapshot) string { return "PUT " + s.Key + " " + s.ETag }

func (s *ixSpy) Delete(ctx context.Context, key string) error {
	if strings.HasPrefix(key, ixRoot) {
		s.mu.Lock()
		s.dels++
		s.single++
		s.mu.Unlock()
	}
	err := s.Bucket.Delete(ctx, key)
	if err == nil {
		s.mu.Lock()
		s.log = append(s.log, "DELETE "+key)
		s.mu.Unlock()
	}
	return err
}

func (s *ixSpy) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	s.mu.Lock()
	for _, k := range keys {
		if strings.HasPrefix(k, ixRoot) {
			s.dels++
		}
	}
	s.mu.Unlock()
	deleted, err := s.Bucket.DeleteBatch(ctx, keys)
	s.mu.Lock()
	for _, k := range deleted {
		s.log = append(s.log, "DELETE "+k)
	}
	s.mu.Unlock()
	return deleted, err
}

// check records a snapshot about to be uploaded that holds an alarm but
// names no entry at its time, or one that does not exist.
func (s *ixSpy) check(ctx context.Context, key string, body []byte) {
	s.mu.Lock()
	s.n++
	path := filepath.Join(s.dir, fmt.Sprintf("check-%d.db", s.n))
	s.mu.Unlock()
	problem := ""
	id, err := ixStateActor(key)
	var st ixDB
	if err == nil {
		st, err = ixDecode(path, body, id)
	}
	switch {
	case err != nil:
		problem = err.Error()
	case st.alarm == nil:
	case st.named == nil:
		problem = fmt.Sprintf("alarm at %d, alarm_indexed %q names no entry at that time", *st.alarm, st.indexed)
	default:
		if _, _, err := s.Bucket.Get(ctx, ixPrefix+st.named.String()); err != nil {
			problem = fmt.Sprintf("alarm at %d names %s, which does not exist: %v", *st.alarm, st.named, err)
		}
	}
	if problem != "" {
		s.mu.Lock()
		s.bad = append(s.bad, key+": "+problem)
		s.mu.Unlock()
	}
}

// counts returns the index PUTs, the index keys deleted, and those of them
// deleted by single-key DELETE requests so far, and sets them to zero.
func (s *ixSpy) counts() (puts, dels, single int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	puts, dels, single = s.puts, s.dels, s.single
	s.puts, s.dels, s.single = 0, 0, 0
	return puts, dels, single
}

// expect fails the test unless the index requests since the last call are
// exactly puts PUTs and dels keys deleted, in multi-object requests.
func (s *ixSpy) expect(t *testing.T, what string, puts, dels int) {
	t.Helper()
	p, d, single := s.counts()
	if p != puts || d != dels {
		t.Errorf("%s: %d index PUTs and %d keys deleted, want %d and %d", what, p, d, puts, dels)
	}
	if single != 0 {
		t.Errorf("%s: %d index keys deleted one request each, want them in multi-object requests", what, single)
	}
}

// mutations returns the mutations logged so far.
func (s *ixSpy) mutations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// noViolations fails the test if a snapshot named no existing entry.
func (s *ixSpy) noViolations(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bad {
		t.Errorf("uploaded snapshot %s", b)
	}
}

// before reports whether mutation a succeeded before mutation b (both
// logged).
func ixBefore(log []string, a, b string) bool {
	ia, ib := -1, -1
	for i, m := range log {
		if m == a && ia < 0 {
			ia = i
		}
		if m == b && ib < 0 {
			ib = i
		}
	}
	return ia >= 0 && ib >= 0 && ia < ib
}

// ixDB is what an actor database holds, as the index tests read it.
type ixDB struct {
	alarm   *int64
	indexed string          // alarm_indexed
	named   *alarmindex.Key // the entry it names at the alarm's time, if any
	inited  bool
}

// ixStateActor reads the actor from a snapshot key,
// cluster/state/<tenant>/<class>/<hex name>/<generation>-<seq>.
func ixStateActor(key string) (abi.ActorID, error) {
	rest := strings.TrimPrefix(key, "cluster/state/")
	i := strings.LastIndex(rest, "/")
	if i < 0 {
		return abi.ActorID{}, fmt.Errorf("malformed snapshot key %q", key)
	}
	return abi.ParsePath(rest[:i])
}

// ixDecode reads a snapshot image of the actor by writing it to path.
func ixDecode(path string, data []byte, id abi.ActorID) (ixDB, error) {
	var out ixDB
	if err := engine.WriteSnapshot(path, data); err != nil {
		return out, err
	}
	defer engine.RemoveDatabase(path)
	st, err := engine.OpenStore(path)
	if err != nil {
		return out, err
	}
	defer st.Close()
	at, ok, err := st.Alarm()
	if err != nil {
		return out, err
	}
	if ok {
		out.alarm = &at
	}
	if out.indexed, _, err = st.Meta(hostmod.MetaAlarmIndexed); err != nil {
		return out, err
	}
	if _, out.inited, err = st.Meta(hostmod.MetaInitDone); err != nil {
		return out, err
	}
	k, err := alarmindex.ParseRecorded(id, out.indexed)
	if err != nil {
		return out, err
	}
	if k != nil && out.alarm != nil && k.DueMs == *out.alarm {
		out.named = k
	}
	return out, nil
}

// ixState reads the newest snapshot of the actor in the bucket (false when
// there is none, or it is a tombstone).
func ixState(t *testing.T, b bucket.Bucket, id abi.ActorID) (cluster.Snapshot, ixDB, bool) {
	t.Helper()
	ctx := context.Background()
	r := cluster.NewReplica(b, "cluster/")
	s, ok, err := cluster.ReadState(ctx, b, "cluster/", id)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return s, ixDB{}, false
	}
	data, _, err := r.Download(ctx, id, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return s, ixDB{}, false
	}
	db, err := ixDecode(filepath.Join(t.TempDir(), "state.db"), data, id)
	if err != nil {
		t.Fatalf("actor %s: snapshot %s: %v", id, s.Key, err)
	}
	return s, db, true
}

// ixNamed returns the entry the newest snapshot names for its alarm, failing
// the test if there is none.
func ixNamed(t *testing.T, b bucket.Bucket, id abi.ActorID) (cluster.Snapshot, alarmindex.Key) {
	t.Helper()
	s, db, ok := ixState(t, b, id)
	if !ok || db.alarm == nil || db.named == nil {
		t.Fatalf("actor %s: the newest snapshot %s names no entry for its alarm (%+v)", id, s.Key, db)
	}
	return s, *db.named
}

// ixEntries lists the actor's index entries, tagged and legacy.
func ixEntries(t *testing.T, b bucket.Bucket, id abi.ActorID) []alarmindex.Key {
	t.Helper()
	keys, err := b.List(context.Background(), ixPrefix+alarmindex.TenantPrefix(id.Tenant), "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	var out []alarmindex.Key
	for _, k := range keys {
		pk, err := alarmindex.ParseKey(strings.TrimPrefix(k, ixPrefix))
		if err != nil {
			t.Fatalf("a key in the index does not parse: %q: %v", k, err)
		}
		if pk.Actor == id {
			out = append(out, pk)
		}
	}
	return out
}

// ixPrefix is the cluster's root: the index is under it.
const ixPrefix = "cluster/"

// ixRoot starts every index entry's object key.
const ixRoot = ixPrefix + alarmindex.Root

// ixExists reports whether the index entry (a key of the index's format)
// exists.
func ixExists(t *testing.T, b bucket.Bucket, key string) bool {
	t.Helper()
	_, _, err := b.Get(context.Background(), ixPrefix+key)
	if errors.Is(err, bucket.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// ixHolder reads the actor's ownership record: the holding node ("" once
// released) and the generation.
func ixHolder(t *testing.T, b bucket.Bucket, id abi.ActorID) (string, uint64) {
	t.Helper()
	body, _, err := b.Get(context.Background(), "cluster/holds/"+id.Path())
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		NodeID     string `json:"node_id"`
		Generation uint64 `json:"generation"`
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.NodeID, rec.Generation
}

// ixDeliveries records a node's deliveries.
type ixDeliveries struct {
	mu  sync.Mutex
	evs []node.DeliveryEvent
}

func (d *ixDeliveries) add(ev node.DeliveryEvent) {
	d.mu.Lock()
	d.evs = append(d.evs, ev)
	d.mu.Unlock()
}

// of returns the deliveries for the actor so far.
func (d *ixDeliveries) of(id abi.ActorID) []node.DeliveryEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []node.DeliveryEvent
	for _, ev := range d.evs {
		if ev.Actor == id {
			out = append(out, ev)
		}
	}
	return out
}

// wait waits for a delivery for the actor that satisfies ok and returns it.
func (d *ixDeliveries) wait(t *testing.T, id abi.ActorID, what string, ok func(node.DeliveryEvent) bool) node.DeliveryEvent {
	t.Helper()
	var got node.DeliveryEvent
	waitFor(t, what, func() bool {
		for _, ev := range d.of(id) {
			if ok(ev) {
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

// ran matches a delivery that ran on-alarm for the alarm at ms.
func ran(ms int64) func(node.DeliveryEvent) bool {
	return func(ev node.DeliveryEvent) bool {
		return ev.Err == nil && ev.Event.Ran && ev.Event.Err == nil && ev.Event.Scheduled == ms
	}
}

// ixFaults is a fault hook for an in-memory bucket that a test can change
// while the bucket is in use.
type ixFaults struct {
	mu sync.Mutex
	f  func(bucket.Op) bucket.Fault
}

func (x *ixFaults) set(f func(bucket.Op) bucket.Fault) {
	x.mu.Lock()
	x.f = f
	x.mu.Unlock()
}

func (x *ixFaults) hook(op bucket.Op) bucket.Fault {
	x.mu.Lock()
	f := x.f
	x.mu.Unlock()
	if f == nil {
		return bucket.Fault{}
	}
	return f(op)
}

// memWithFaults returns an in-memory bucket whose faults the test sets.
func memWithFaults() (*bucket.Mem, *ixFaults) {
	m := bucket.NewMem()
	x := &ixFaults{}
	m.Faults = x.hook
	return m, x
}

// isIndexPut and friends match requests for fault hooks.
func isIndexPut(op bucket.Op) bool {
	return op.Kind == bucket.OpPut && strings.HasPrefix(op.Key, ixRoot)
}

func isIndexDelete(op bucket.Op) bool {
	switch op.Kind {
	case bucket.OpDelete:
		return strings.HasPrefix(op.Key, ixRoot)
	case bucket.OpDeleteBatch:
		for _, k := range op.Keys {
			if strings.HasPrefix(k, ixRoot) {
				return true
			}
		}
	}
	return false
}

// deletesKey: op is a DELETE of key, or a multi-object delete that has it.
func deletesKey(op bucket.Op, key string) bool {
	return (op.Kind == bucket.OpDelete && op.Key == key) ||
		(op.Kind == bucket.OpDeleteBatch && slices.Contains(op.Keys, key))
}

func isStatePut(op bucket.Op) bool {
	return op.Kind == bucket.OpPut && strings.HasPrefix(op.Key, "cluster/state/")
}

var errInjected = errors.New("injected fault")

// ---------------------------------------------------------------------
// The owner keeps the index equal to the committed alarm.

func TestTheOwnerListsTheAlarmBeforeReplicatingTheEventAndDeletesTheReplacedEntryAfter(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true})
		id := ixActor("owner")
		t1 := time.Now().Add(time.Hour).UnixMilli()
		t2 := t1 + 60_000

		for _, kind := range []node.EventKind{node.ExecDurable, node.Exec} {
			ixRun(t, b, a, id, kind, "set "+strconv.FormatInt(t1, 10))
			snap1, e1 := ixNamed(t, b, id)
			if e1.DueMs != t1 || e1.Legacy || e1.Tag.Generation != snap1.Generation {
				t.Fatalf("the snapshot names %s, want a tagged entry at %d of generation %d", e1, t1, snap1.Generation)
			}
			if got := ixEntries(t, b, id); len(got) != 1 || got[0] != e1 {
				t.Fatalf("index entries %v, want only %s", got, e1)
			}
			if log := spy.mutations(); !ixBefore(log, "PUT "+ixPrefix+e1.String(), ixPut(snap1)) {
				t.Fatalf("the entry %s was not listed before the snapshot %s was uploaded: %v", e1, snap1.Key, log)
			}

			ixRun(t, b, a, id, kind, "set "+strconv.FormatInt(t2, 10))
			snap2, e2 := ixNamed(t, b, id)
			if e2.DueMs != t2 {
				t.Fatalf("the snapshot names %s, want an entry at %d", e2, t2)
			}
			if got := ixEntries(t, b, id); len(got) != 1 || got[0] != e2 {
				t.Fatalf("index entries %v, want only %s: the replaced entry is deleted", got, e2)
			}
			log := spy.mutations()
			if !ixBefore(log, "PUT "+ixPrefix+e2.String(), ixPut(snap2)) || !ixBefore(log, ixPut(snap2), "DELETE "+ixPrefix+e1.String()) {
				t.Fatalf("want PUT %s, then the snapshot %s, then DELETE %s; got %v", e2, snap2.Key, e1, log)
			}

			ixRun(t, b, a, id, kind, "clear")
			snap3, db, _ := ixState(t, b, id)
			if db.alarm != nil || db.indexed != "" {
				t.Fatalf("after clear the snapshot holds alarm %v and alarm_indexed %q, want none and \"\"", db.alarm, db.indexed)
			}
			if got := ixEntries(t, b, id); len(got) != 0 {
				t.Fatalf("index entries %v after clear, want none", got)
			}
			if !ixBefore(spy.mutations(), ixPut(snap3), "DELETE "+ixPrefix+e2.String()) {
				t.Fatalf("the cleared alarm's entry was deleted before the event was replicated: %v", spy.mutations())
			}
		}
		spy.noViolations(t)
	})
}

func TestIndexRequestsPerEvent(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true})
		bn := ixNode(t, spy, "b", t.TempDir(), ixConfig{steady: true})
		id := ixActor("count")
		t1 := time.Now().Add(time.Hour).UnixMilli()
		spy.counts()

		ixRun(t, nil, a, id, node.ExecDurable, "put k 1")
		spy.expect(t, "a new actor's event without an alarm", 0, 0)
		ixRun(t, nil, a, id, node.ExecDurable, "set "+strconv.FormatInt(t1, 10))
		spy.expect(t, "setting an alarm", 1, 0)
		ixRun(t, b, a, id, node.Exec, "put k 2")
		spy.expect(t, "an exec event that leaves the alarm alone", 0, 0)
		ixRun(t, nil, a, id, node.ExecDurable, "set "+strconv.FormatInt(t1, 10))
		spy.expect(t, "setting the alarm to the time it has", 0, 0)
		ixRun(t, b, a, id, node.Exec, "set "+strconv.FormatInt(t1+1, 10))
		spy.expect(t, "moving the alarm (exec)", 1, 1)
		ixRun(t, nil, a, id, node.ExecDurable, "set "+strconv.FormatInt(t1+2, 10))
		spy.expect(t, "moving the alarm (exec-durable)", 1, 1)

		// A new generation: b takes the actor over and runs an event that
		// leaves the alarm alone.
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		spy.counts()
		if v := ixRun(t, nil, bn, id, node.ExecDurable, "getkv k"); v != "2" {
			t.Fatalf("b read k=%q, want 2", v)
		}
		spy.expect(t, "the first event of a new generation, alarm unchanged (exec-durable)", 0, 0)
		ixRun(t, b, bn, id, node.Exec, "put k 3")
		spy.expect(t, "an exec event of the new generation, alarm unchanged", 0, 0)
		if snap, e := ixNamed(t, b, id); snap.Generation != 2 || e.Tag.Generation != 1 {
			t.Fatalf("the new generation's snapshot %s names %s; want generation 2 naming the entry generation 1 wrote", snap.Key, e)
		}
		ixRun(t, nil, bn, id, node.ExecDurable, "set "+strconv.FormatInt(t1+3, 10))
		spy.expect(t, "moving the alarm under the new generation", 1, 1)
		ixRun(t, nil, bn, id, node.ExecDurable, "clear")
		spy.expect(t, "clearing the alarm", 0, 1)
		ixRun(t, nil, bn, id, node.ExecDurable, "put k 4")
		spy.expect(t, "an event without an alarm", 0, 0)
		spy.noViolations(t)
	})
}

func TestNewKeysCarryTheOwnersGeneration(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		id := ixOneshot("gen")
		t1 := time.Now().Add(time.Hour).UnixMilli()
		for i, kind := range []node.EventKind{node.ExecDurable, node.Exec, node.ExecDurable} {
			n := ixNode(t, spy, fmt.Sprintf("n%d", i), t.TempDir(), ixConfig{steady: true, class: oneshotClass})
			ixSet(t, b, n, id, kind, t1+int64(i))
			_, gen := ixHolder(t, b, id)
			snap, e := ixNamed(t, b, id)
			if gen != uint64(i+1) || e.Tag.Generation != gen || snap.Generation != gen {
				t.Fatalf("hold %d: the entry is %s and the snapshot %s; want both of the hold's generation %d", i+1, e, snap.Key, gen)
			}
			if err := n.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		spy.noViolations(t)
	})
}

func TestExecDurableListsAPendingAlarmFirstUnderItsReplicasGeneration(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		id := ixOneshot("durable")
		t1 := time.Now().Add(time.Hour).UnixMilli()
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true, class: oneshotClass})
		ixSet(t, nil, a, id, node.ExecDurable, t1-1000)
		_, e0 := ixNamed(t, b, id)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		bn := ixNode(t, spy, "b", t.TempDir(), ixConfig{steady: true, class: oneshotClass})
		// The reply of an exec-durable event comes after its upload: the
		// entry exists and the snapshot names it when the request returns.
		ixSet(t, nil, bn, id, node.ExecDurable, t1)
		if got := ixEntries(t, b, id); len(got) != 1 || got[0] == e0 {
			t.Fatalf("index entries %v; want only the new one, %s replaced", got, e0)
		}
		snap, e := ixNamed(t, b, id)
		if snap.Generation != 2 || e.Tag.Generation != snap.Generation || e.DueMs != t1 {
			t.Fatalf("the replica %s names %s; want an entry at %d of the replica's generation 2", snap.Key, e, t1)
		}
		if !ixExists(t, b, e.String()) {
			t.Fatalf("the entry %s does not exist", e)
		}
		if log := spy.mutations(); !ixBefore(log, "PUT "+ixPrefix+e.String(), ixPut(snap)) {
			t.Fatalf("the entry was not listed before the replica was uploaded: %v", log)
		}
		spy.noViolations(t)
	})
}

// legacyState turns the actor's newest state into one written before tags
// existed: the snapshot's alarm_indexed is the bare due time and the only
// entry is the legacy key. The actor must be released.
func legacyState(t *testing.T, b bucket.Bucket, id abi.ActorID) alarmindex.Key {
	t.Helper()
	ctx := context.Background()
	snap, e := ixNamed(t, b, id)
	r := cluster.NewReplica(b, "cluster/")
	data, etag, err := r.Download(ctx, id, snap)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "legacy.db")
	if err := engine.WriteSnapshot(path, data); err != nil {
		t.Fatal(err)
	}
	st, err := engine.OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	legacy := alarmindex.Key{Actor: id, DueMs: e.DueMs, Legacy: true}
	if err := st.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := st.SetMeta(hostmod.MetaAlarmIndexed, alarmindex.FormatRecorded(&legacy)); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	data, err = st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := r.Upload(ctx, id, snap.Generation, etag, data); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, ixPrefix+e.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, ixPrefix+legacy.String(), nil, bucket.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if got := alarmindex.FormatRecorded(&legacy); len(got) != 15 {
		t.Fatalf("a legacy alarm_indexed is %q, want the bare 15-digit time", got)
	}
	return legacy
}

func TestALegacyEntryIsReplacedByATaggedOneOnTheNextEvent(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		id := ixOneshot("legacy")
		t1 := time.Now().Add(time.Hour).UnixMilli()
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true, class: oneshotClass})
		ixSet(t, nil, a, id, node.ExecDurable, t1)
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		legacy := legacyState(t, b, id)

		bn := ixNode(t, spy, "b", t.TempDir(), ixConfig{steady: true, class: oneshotClass})
		spy.counts()
		ixSet(t, nil, bn, id, node.ExecDurable, t1) // an event that leaves the alarm alone
		spy.expect(t, "the first event after a legacy entry", 1, 1)
		snap, e := ixNamed(t, b, id)
		if e.Legacy || e.DueMs != t1 || e.Tag.Generation != snap.Generation {
			t.Fatalf("the snapshot names %s; want a tagged entry at %d of generation %d", e, t1, snap.Generation)
		}
		if got := ixEntries(t, b, id); len(got) != 1 || got[0] != e {
			t.Fatalf("index entries %v, want only %s: the legacy entry is replaced", got, e)
		}
		if log := spy.mutations(); !ixBefore(log, ixPut(snap), "DELETE "+ixPrefix+legacy.String()) {
			t.Fatalf("the legacy entry was deleted before the snapshot naming its replacement was uploaded: %v", log)
		}
		ixSet(t, nil, bn, id, node.ExecDurable, t1)
		spy.expect(t, "the next event, once migrated", 0, 0)
		spy.noViolations(t)
	})
}

// ---------------------------------------------------------------------
// When the index cannot be brought in line, the node gives the actor up.

// ixGivenUp checks that a failed replication of the actor uploaded nothing
// and let the hold go, and that a takeover finds the state from before.
func ixGivenUp(t *testing.T, b bucket.Bucket, id abi.ActorID, before cluster.Snapshot, e alarmindex.Key) {
	t.Helper()
	if s := latestOrZero(t, b, id); s != before {
		t.Errorf("the newest snapshot is %s, want %s: nothing is uploaded", s.Key, before.Key)
	}
	if holder, _ := ixHolder(t, b, id); holder != "" {
		t.Errorf("the actor is still held by %q, want released", holder)
	}
	if !ixExists(t, b, e.String()) {
		t.Errorf("the entry %s the bucket's state names is gone", e)
	}
}

func latestOrZero(t *testing.T, b bucket.Bucket, id abi.ActorID) cluster.Snapshot {
	t.Helper()
	s, _, err := cluster.ReadState(context.Background(), b, "cluster/", id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAFailedIndexPutGivesTheActorUp(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, b bucket.Bucket, failNextIndexPut func()) {
		spy := newIxSpy(t, b)
		id := ixOneshot("putfails")
		t1 := time.Now().Add(time.Hour).UnixMilli()
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true, class: oneshotClass})
		ixSet(t, nil, a, id, node.ExecDurable, t1)
		before, e1 := ixNamed(t, b, id)

		failNextIndexPut()
		_, err := a.Exec(context.Background(), id, setBody(t1+1000), node.ExecDurable)
		if err == nil {
			t.Fatal("the event succeeded though its alarm could not be listed")
		}
		var ae *abi.ActorError
		if !errors.As(err, &ae) || ae.ID != id || strings.Count(err.Error(), id.String()) != 1 {
			t.Errorf("the error %q is not an *abi.ActorError naming the actor %s once", err, id)
		}
		ixGivenUp(t, b, id, before, e1)
		if got := ixEntries(t, b, id); len(got) != 1 || got[0] != e1 {
			t.Errorf("index entries %v, want only %s", got, e1)
		}
		// The node takes the actor again from the bucket: the event that
		// could not be indexed is not there.
		if st, err := a.State(context.Background(), id); err != nil || st.Alarm == nil || *st.Alarm != t1 {
			t.Errorf("after the failure the alarm is %+v (%v), want %d from the bucket", st, err, t1)
		}
		spy.noViolations(t)
	}
	ixWithFailingIndexPut(t, run, func(t *testing.T, proxy *s3test.Proxy) {
		if n := proxy.Count("PUT"); n != 1+s3.DefaultMaxAttempts {
			t.Errorf("the proxy saw %d PUTs, want %d: one listing, then a failed one with its retries", n, 1+s3.DefaultMaxAttempts)
		}
	})
}

// ixWithFailingIndexPut runs run on an in-memory bucket and on versitygw,
// each with a function that fails the next index PUT (on versitygw, that
// PUT and its retries are answered 503 by a proxy only index requests go
// through); then afterS3, if not nil, sees the proxy.
func ixWithFailingIndexPut(t *testing.T, run func(t *testing.T, b bucket.Bucket, failNextIndexPut func()), afterS3 func(t *testing.T, proxy *s3test.Proxy)) {
	t.Run("mem", func(t *testing.T) {
		m, faults := memWithFaults()
		run(t, m, func() {
			var once atomic.Bool
			faults.set(func(op bucket.Op) bucket.Fault {
				if isIndexPut(op) && once.CompareAndSwap(false, true) {
					return bucket.Fault{Err: errInjected}
				}
				return bucket.Fault{}
			})
		})
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		proxy := s3test.NewProxy(t, srv.Endpoint)
		// Index requests go through the proxy, the rest directly, so a
		// failure aimed at PUTs hits only the index.
		b := ixSplit{Bucket: srv.Bucket, index: srv.NewClient(t, s3.WithEndpoint(proxy.URL))}
		run(t, b, func() { proxy.FailNext("PUT", s3.DefaultMaxAttempts, s3test.Respond503) })
		if afterS3 != nil {
			afterS3(t, proxy)
		}
	})
}

// A firing whose handler moves the alarm PUTs the new entry before the
// event commits. When that PUT fails, nothing is uploaded: the node gives
// the actor up, the entry the bucket's state names stays, and the alarm
// fires again from the bucket's state, this time listed, uploaded and the
// replaced entry deleted, in that order.
func TestAFiringWhoseIndexPutFailsRunsAgain(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, b bucket.Bucket, failNextIndexPut func()) {
		spy := newIxSpy(t, b)
		log := &ixDeliveries{}
		reg := prometheus.NewRegistry()
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true, log: log, registerer: reg})
		id := ixActor("firingputfails")
		t1 := time.Now().Add(time.Second).UnixMilli()
		t2 := t1 + time.Hour.Milliseconds()
		ixRun(t, b, a, id, node.ExecDurable, "mode set:"+strconv.FormatInt(t2, 10))
		ixSet(t, b, a, id, node.ExecDurable, t1)
		before, e1 := ixNamed(t, b, id)

		failNextIndexPut()
		ev := log.wait(t, id, "the firing whose index PUT failed", func(ev node.DeliveryEvent) bool { return ev.Err != nil })
		if !strings.Contains(ev.Err.Error(), id.String()) {
			t.Errorf("the firing's error %q does not name the actor", ev.Err)
		}
		ixGivenUp(t, b, id, before, e1)
		if got := gathered(t, reg, "wasmkeep_node_actors_given_up_total"); got != 1 {
			t.Errorf("actors given up = %v after one failed firing, want 1", got)
		}

		log.wait(t, id, "the firing run again", func(ev node.DeliveryEvent) bool { return ev.Err == nil && ev.Event.Ran })
		snap, e2 := ixNamed(t, b, id)
		if e2.DueMs != t2 {
			t.Fatalf("the state names %s, want the handler's alarm at %d", e2, t2)
		}
		// The replaced entry goes in a batch of deletes, off the firing's
		// path: the bucket can list it gone a moment before the batch's
		// call returns and the spy logs it.
		waitFor(t, "the replaced entry deleted", func() bool {
			got := ixEntries(t, b, id)
			return len(got) == 1 && got[0] == e2 && slices.Contains(spy.mutations(), "DELETE "+ixPrefix+e1.String())
		})
		if m := spy.mutations(); !ixBefore(m, "PUT "+ixPrefix+e2.String(), ixPut(snap)) || !ixBefore(m, ixPut(snap), "DELETE "+ixPrefix+e1.String()) {
			t.Fatalf("want PUT %s, then the snapshot %s, then DELETE %s; got %v", e2, snap.Key, e1, m)
		}
		if got := ixRun(t, b, a, id, node.ExecDurable, "getkv log"); got != strconv.FormatInt(t1, 10)+":0" {
			t.Errorf("the handler's log %q, want the one run that was replicated", got)
		}
		spy.noViolations(t)
	}
	ixWithFailingIndexPut(t, run, nil)
}

// ixSplit sends index requests (keys under alarms/) to index, the rest to
// the embedded bucket.
type ixSplit struct {
	bucket.Bucket
	index bucket.Bucket
}

func (s ixSplit) pick(key string) bucket.Bucket {
	if strings.HasPrefix(key, ixRoot) {
		return s.index
	}
	return s.Bucket
}

func (s ixSplit) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.pick(key).Get(ctx, key)
}

func (s ixSplit) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	return s.pick(key).Put(ctx, key, body, cond)
}

func (s ixSplit) Delete(ctx context.Context, key string) error {
	return s.pick(key).Delete(ctx, key)
}

func (s ixSplit) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	var index, rest []string
	for _, k := range keys {
		if strings.HasPrefix(k, ixRoot) {
			index = append(index, k)
		} else {
			rest = append(rest, k)
		}
	}
	d1, err1 := s.index.DeleteBatch(ctx, index)
	d2, err2 := s.Bucket.DeleteBatch(ctx, rest)
	return append(d1, d2...), errors.Join(err1, err2)
}

func (s ixSplit) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	return s.pick(prefix).List(ctx, prefix, startAfter, limit)
}

func TestAListingWhoseReplyWasLostIsRetriedAsTheSameEntry(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	b := ixSplit{Bucket: srv.Bucket, index: srv.NewClient(t, s3.WithEndpoint(proxy.URL))}
	spy := newIxSpy(t, b)
	id := ixOneshot("lostreply")
	t1 := time.Now().Add(time.Hour).UnixMilli()
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{steady: true, class: oneshotClass})
	// The PUT lands but its reply is lost; the client's retry finds the
	// entry (412), which the rules take as success (R1's one exception).
	proxy.FailNext("PUT", 1, s3test.DropAfterForward)
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	_, e := ixNamed(t, b, id)
	if got := ixEntries(t, b, id); len(got) != 1 || got[0] != e {
		t.Fatalf("index entries %v, want only %s", got, e)
	}
	if n := proxy.Count("PUT"); n != 2 {
		t.Errorf("the proxy saw %d PUTs, want 2: the listing and its retry", n)
	}
	spy.noViolations(t)
}

// ---------------------------------------------------------------------
// The design's cases.

func TestACrashBetweenThePutAndTheUploadLeavesAnExtraEntryNeverAMissingOne(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("crash")
	cLog := &ixDeliveries{}
	ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
	t1 := time.Now().Add(time.Second).UnixMilli()
	t2 := t1 + 500
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	before, e1 := ixNamed(t, m, id)

	// The snapshot upload after the index PUT fails: for the bucket, the
	// same as a crash between the two.
	faults.set(func(op bucket.Op) bucket.Fault {
		if isStatePut(op) {
			return bucket.Fault{Err: errInjected}
		}
		return bucket.Fault{}
	})
	if _, err := a.Exec(context.Background(), id, setBody(t2), node.ExecDurable); err == nil {
		t.Fatal("the event succeeded though its upload failed")
	}
	a.Crash()
	faults.set(nil)

	ixGivenUp(t, m, id, before, e1)
	entries := ixEntries(t, m, id)
	if len(entries) != 2 {
		t.Fatalf("index entries %v, want the named %s and the extra one at %d", entries, e1, t2)
	}
	var extra alarmindex.Key
	for _, e := range entries {
		if e != e1 {
			extra = e
		}
	}
	if extra.DueMs != t2 {
		t.Fatalf("the extra entry is %s, want one at %d", extra, t2)
	}

	// Nothing is lost: c, which never ran the actor, fires the committed
	// alarm, then removes the extra entry when it comes due.
	cLog.wait(t, id, "the committed alarm firing on c", ran(t1))
	ev := cLog.wait(t, id, "the extra entry delivered on c", func(ev node.DeliveryEvent) bool {
		return ev.Err == nil && ev.TimerAt == t2
	})
	if ev.Event.Ran || ev.Outcome != alarmindex.OutcomeStale {
		t.Errorf("the extra entry's delivery ran=%v outcome=%v; want a stale entry, not run", ev.Event.Ran, ev.Outcome)
	}
	waitFor(t, "the index to empty", func() bool { return len(ixEntries(t, m, id)) == 0 })
	if got := cLog.of(id); countRan(got) != 1 {
		t.Errorf("on-alarm ran %d times on c, want once: %+v", countRan(got), got)
	}
	spy.noViolations(t)
}

func countRan(evs []node.DeliveryEvent) int {
	n := 0
	for _, ev := range evs {
		if ev.Event.Ran {
			n++
		}
	}
	return n
}

// lateDeletes holds every index DELETE while on is set: the requests fail to
// their caller and land when the test calls ApplyLate.
func lateDeletes(faults *ixFaults, on *atomic.Bool) {
	faults.set(func(op bucket.Op) bucket.Fault {
		if on.Load() && isIndexDelete(op) {
			return bucket.Fault{Late: true}
		}
		return bucket.Fault{}
	})
}

// takeOver retries a request on n until the actor's previous holder, which
// crashed, is judged expired.
func takeOver(t *testing.T, n *node.Node, id abi.ActorID, req []byte) {
	t.Helper()
	var err error
	waitFor(t, "the takeover of "+id.String(), func() bool {
		_, err = n.Exec(context.Background(), id, req, node.ExecDurable)
		var held *cluster.HeldElsewhereError
		return !errors.As(err, &held)
	})
	if err != nil {
		t.Fatalf("%q on actor %s: %v", req, id, err)
	}
	n.FlushDeletes(context.Background())
}

func TestADeleteThatLandsLateAfterATakeoverRemovesNothingNamed(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	var late atomic.Bool
	lateDeletes(faults, &late)
	spy := newIxSpy(t, m)
	id := ixOneshot("late-takeover")
	cLog := &ixDeliveries{}
	// Only c runs a timer and sweeps; t1 leaves b time to take over first.
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
	bn := ixNode(t, spy, "b", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
	ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
	t1 := time.Now().Add(2500 * time.Millisecond).UnixMilli()
	t2 := t1 + 3_600_000

	ixSet(t, nil, a, id, node.ExecDurable, t1)
	_, e1 := ixNamed(t, m, id)
	late.Store(true)
	ixSet(t, nil, a, id, node.ExecDurable, t2)
	late.Store(false)
	if held := m.Late(); len(held) != 1 || !slices.Contains(held[0].Keys, ixPrefix+e1.String()) {
		t.Fatalf("held requests %v, want the DELETE of %s", held, e1)
	}
	a.Crash()

	// b takes over and moves the alarm back to t1: a new entry at the
	// same time, under a fresh key.
	takeOver(t, bn, id, setBody(t1))
	_, named := ixNamed(t, m, id)
	if named.DueMs != t1 || named == e1 {
		t.Fatalf("b's entry is %s; want a fresh one at %d, not %s", named, t1, e1)
	}
	if n := m.ApplyLate(); n != 1 {
		t.Fatalf("applied %d late requests, want 1", n)
	}
	if !ixExists(t, m, named.String()) {
		t.Fatalf("the late DELETE of %s removed the named entry %s", e1, named)
	}
	if err := bn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	cLog.wait(t, id, "the alarm firing on c, which never ran the actor", ran(t1))
	spy.noViolations(t)
}

func TestADeleteThatLandsLateAfterAnOwnersOwnRescheduleRemovesNothingNamed(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	var late atomic.Bool
	lateDeletes(faults, &late)
	spy := newIxSpy(t, m)
	id := ixOneshot("late-reschedule")
	cLog := &ixDeliveries{}
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
	ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
	t1 := time.Now().Add(time.Second).UnixMilli()
	t2 := t1 + 3_600_000

	ixSet(t, nil, a, id, node.ExecDurable, t1)
	_, e1 := ixNamed(t, m, id)
	late.Store(true)
	ixSet(t, nil, a, id, node.ExecDurable, t2)
	late.Store(false)
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	_, named := ixNamed(t, m, id)
	if named.DueMs != t1 || named == e1 {
		t.Fatalf("the rescheduled entry is %s; want a fresh one at %d, not %s", named, t1, e1)
	}
	if n := m.ApplyLate(); n != 1 {
		t.Fatalf("applied %d late requests, want 1", n)
	}
	if !ixExists(t, m, named.String()) {
		t.Fatalf("the late DELETE of %s removed the named entry %s", e1, named)
	}
	a.Crash()
	cLog.wait(t, id, "the alarm firing on c, which never ran the actor", ran(t1))
	spy.noViolations(t)
}

func TestLegacyEntriesNextToTaggedOnes(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		id := ixOneshot("mixed")
		cLog := &ixDeliveries{}
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
		ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
		now := time.Now()
		t0 := now.Add(-time.Minute).UnixMilli() // a legacy entry left by old code, long stale
		t1 := now.Add(time.Second).UnixMilli()  // the committed alarm

		ixSet(t, nil, a, id, node.ExecDurable, t1)
		_, e1 := ixNamed(t, b, id)
		stale := alarmindex.Key{Actor: id, DueMs: t0, Legacy: true}
		beside := alarmindex.Key{Actor: id, DueMs: t1, Legacy: true}
		for _, k := range []alarmindex.Key{stale, beside} {
			if _, err := b.Put(context.Background(), ixPrefix+k.String(), nil, bucket.Cond{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		// c delivers the stale legacy entry: the committed alarm is
		// elsewhere, so it is deleted by its exact name, and the tagged
		// entry that stands for the alarm stays.
		ev := cLog.wait(t, id, "the stale legacy entry delivered", func(ev node.DeliveryEvent) bool { return ev.TimerAt == t0 && ev.Err == nil })
		if ev.Outcome != alarmindex.OutcomeStale || len(ev.Deleted) != 1 || ev.Deleted[0] != stale.String() {
			t.Fatalf("the stale legacy entry's delivery: %+v; want it deleted, and only it", ev)
		}
		if !ixExists(t, b, e1.String()) {
			t.Fatalf("the tagged entry %s was removed with the legacy one", e1)
		}
		// Then the alarm fires once, and both entries at its time go.
		cLog.wait(t, id, "the alarm firing on c", ran(t1))
		waitFor(t, "the index to empty", func() bool { return len(ixEntries(t, b, id)) == 0 })
		if n := countRan(cLog.of(id)); n != 1 {
			t.Errorf("on-alarm ran %d times, want once", n)
		}
		spy.noViolations(t)
	})
}

func TestAnAlarmFromSingleNodeDataIsIndexedBeforeItsFirstUpload(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		id := ixOneshot("joiner")
		dir := t.TempDir()
		t1 := time.Now().Add(time.Second).UnixMilli()

		// A node runs alone on dir and sets an alarm.
		solo, err := node.New(ctx, node.Config{DataDir: dir, Classes: ixClasses(t, oneshotClass)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := solo.Request(ctx, id, setBody(t1)); err != nil {
			t.Fatalf("set on the single node: %v", err)
		}
		if err := solo.Close(ctx); err != nil {
			t.Fatal(err)
		}

		spy := newIxSpy(t, b)
		cLog := &ixDeliveries{}
		ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
		// A cluster node starts on that data directory and joins: the
		// actor's first snapshot names an entry listed before it.
		j := ixNode(t, spy, "j", dir, ixConfig{class: oneshotClass, noStart: true})
		snap, e := ixNamed(t, b, id)
		if snap.Generation != 1 || snap.Seq != 0 || e.DueMs != t1 || e.Legacy || e.Tag.Generation != 1 {
			t.Fatalf("the first snapshot %s names %s; want generation 1's naming a tagged entry at %d of generation 1", snap.Key, e, t1)
		}
		if log := spy.mutations(); !ixBefore(log, "PUT "+ixPrefix+e.String(), ixPut(snap)) {
			t.Fatalf("the entry was not listed before the first upload: %v", log)
		}
		spy.noViolations(t)

		// The joined node dies; c, which never ran the actor, fires it.
		j.Crash()
		cLog.wait(t, id, "the alarm firing on c", ran(t1))
	})
}

func TestAnEntryForAnActorTheBucketNeverHadStaysWithoutCreatingIt(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		spy := newIxSpy(t, b)
		id := ixOneshot("never")
		due := time.Now().Add(-2 * time.Second).UnixMilli()
		entry := alarmindex.Key{Actor: id, DueMs: due, Tag: alarmindex.Tag{Generation: 1, Nonce: "ab"}}
		if _, err := b.Put(ctx, ixPrefix+entry.String(), nil, bucket.Cond{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		const retryMax = 1500 * time.Millisecond
		log := &ixDeliveries{}
		dir := t.TempDir()
		n := ixNode(t, spy, "n", dir, ixConfig{class: oneshotClass, retryMax: retryMax, log: log})

		first := log.wait(t, id, "the sweep delivering the entry", func(node.DeliveryEvent) bool { return true })
		if first.Err != nil || first.Event.Ran || first.Outcome != alarmindex.OutcomeKeep {
			t.Fatalf("the delivery: err %v, ran %v, outcome %v; want the entry kept without running the actor", first.Err, first.Event.Ran, first.Outcome)
		}
		if first.RetryAt < first.At.Add(-time.Second).Add(retryMax).UnixMilli() {
			t.Errorf("retry at %d, want retry_max (%v) after the delivery at %v", first.RetryAt, retryMax, first.At)
		}
		check := func(when string) {
			t.Helper()
			if !ixExists(t, b, entry.String()) {
				t.Errorf("%s: the entry was removed", when)
			}
			if s := latestOrZero(t, b, id); s.Key != "" {
				t.Errorf("%s: the bucket has state %s for the actor", when, s.Key)
			}
			if holder, _ := ixHolder(t, b, id); holder != "" {
				t.Errorf("%s: the actor is held by %q, want released at once", when, holder)
			}
		}
		check("after the first delivery")

		second := log.wait(t, id, "the entry tried again", func(ev node.DeliveryEvent) bool { return ev.TimerAt != first.TimerAt })
		if second.TimerAt != first.RetryAt {
			t.Errorf("the second delivery was for %d, want the retry at %d", second.TimerAt, first.RetryAt)
		}
		if got := log.of(id); len(got) != 2 {
			t.Errorf("%d deliveries before the retry came due, want 1 (sweeps must not cut retry_max short): %+v", len(got)-1, got)
		}
		if second.Outcome != alarmindex.OutcomeKeep {
			t.Errorf("the retry's outcome is %v, want keep", second.Outcome)
		}
		check("after the retry")

		// A restart of the node that delivered it must not create the actor
		// either: its data directory holds only what the delivery opened.
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ixNode(t, spy, "n2", dir, ixConfig{class: oneshotClass, noStart: true})
		if s := latestOrZero(t, b, id); s.Key != "" {
			t.Errorf("after a restart of the delivering node the bucket has state %s for the actor", s.Key)
		}
		spy.noViolations(t)
	})
}

func TestRecordingFailsAfterThePutTheUnnamedEntryIsDeliveredThenRemoved(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("unrecorded")
	dirA := t.TempDir()
	cLog := &ixDeliveries{}
	// a only serves requests (its timer and sweeps do not run), so the
	// entries are delivered by c.
	a := ixNode(t, spy, "a", dirA, ixConfig{class: oneshotClass, noStart: true})
	ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
	t1 := time.Now().Add(time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	before, e1 := ixNamed(t, m, id)

	// From the moment the new entry is PUT, a write transaction is left
	// open on the actor's database: recording the entry fails, as any
	// failed write of the meta would. (No other connection can hold the
	// lock: an open database is held exclusively.)
	var rollback func()
	var lockErr error
	var once atomic.Bool
	faults.set(func(op bucket.Op) bucket.Fault {
		if isIndexPut(op) && once.CompareAndSwap(false, true) {
			rollback, lockErr = a.BeginOnOpenActor(id)
		}
		return bucket.Fault{}
	})
	t0 := time.Now().Add(6 * time.Second).UnixMilli()

	_, err := a.Exec(context.Background(), id, setBody(t0), node.ExecDurable)
	faults.set(nil)
	if lockErr != nil {
		t.Fatalf("locking the database: %v", lockErr)
	}
	if rollback != nil {
		rollback()
	}
	if err == nil || !strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), "record") {
		t.Fatalf("the event's error is %v; want a failure to record the entry, naming the actor", err)
	}
	ixGivenUp(t, m, id, before, e1)
	var unnamed alarmindex.Key
	for _, e := range ixEntries(t, m, id) {
		if e != e1 {
			unnamed = e
		}
	}
	if unnamed.DueMs != t0 {
		t.Fatalf("index entries %v; want the named %s and an unnamed one at %d", ixEntries(t, m, id), e1, t0)
	}
	a.Crash()

	// The unnamed entry is delivered (the committed alarm is elsewhere) and
	// removed; the named one stays, so nothing is lost.
	ev := cLog.wait(t, id, "the unnamed entry delivered on c", func(ev node.DeliveryEvent) bool { return ev.TimerAt == t0 && ev.Err == nil })
	if ev.Event.Ran || ev.Outcome != alarmindex.OutcomeStale || len(ev.Deleted) != 1 || ev.Deleted[0] != unnamed.String() {
		t.Fatalf("the unnamed entry's delivery: ran %v, %+v; want it removed as stale", ev.Event.Ran, ev)
	}
	if got := ixEntries(t, m, id); len(got) != 1 || got[0] != e1 {
		t.Fatalf("index entries %v, want only the named %s", got, e1)
	}
	if _, named := ixNamed(t, m, id); named != e1 {
		t.Fatalf("the state names %s, want %s", named, e1)
	}
	spy.noViolations(t)
}

func TestGivingTheActorUpAfterAFailedListing(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("listfails")
	aLog := &ixDeliveries{}
	// A replaced entry whose DELETE failed is in no timer: a walk meets
	// it when the Deleter gives it up or, here sooner, at the latest a
	// safety period after the last walk (docs/design.md#relist).
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, log: aLog, retryAfterError: 100 * time.Millisecond, safety: time.Second})
	t1 := time.Now().Add(time.Second).UnixMilli()
	t2 := time.Now().Add(time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	_, e1 := ixNamed(t, m, id)

	// Moving the alarm leaves the old entry behind (its DELETE fails), and
	// the delivery's LIST of the actor's entries at t1 fails.
	var listFails, deleteFails atomic.Bool
	listFails.Store(true)
	deleteFails.Store(true)
	faults.set(func(op bucket.Op) bucket.Fault {
		if deletesKey(op, ixPrefix+e1.String()) && deleteFails.Load() {
			return bucket.Fault{Err: errInjected}
		}
		if op.Kind == bucket.OpList && op.Prefix == ixPrefix+alarmindex.TaggedPrefix(id, t1) && listFails.Load() {
			return bucket.Fault{Err: errInjected}
		}
		return bucket.Fault{}
	})
	ixSet(t, nil, a, id, node.ExecDurable, t2)
	before, e2 := ixNamed(t, m, id)
	if !ixExists(t, m, e1.String()) {
		t.Fatalf("the entry %s was deleted though its DELETE failed", e1)
	}

	ev := aLog.wait(t, id, "the stale entry delivered", func(ev node.DeliveryEvent) bool { return ev.TimerAt == t1 })
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), id.String()) || !strings.Contains(ev.Err.Error(), "list") {
		t.Fatalf("the delivery's error is %v; want the failed listing, naming the actor", ev.Err)
	}
	ixGivenUp(t, m, id, before, e2)
	if !ixExists(t, m, e1.String()) {
		t.Errorf("the stale entry %s was deleted though its listing failed", e1)
	}
	if len(ev.Deleted) != 0 {
		t.Errorf("the failed delivery deleted %v", ev.Deleted)
	}

	// Once the bucket works again, the stale entry goes: the Deleter's
	// retry of the failed DELETE or a later delivery removes it. (The
	// DELETE fails until now, or its retry, 1 s later, would have removed
	// the entry before its delivery.)
	deleteFails.Store(false)
	listFails.Store(false)
	waitFor(t, "the stale entry removed", func() bool { return !ixExists(t, m, e1.String()) })
	if _, named := ixNamed(t, m, id); named != e2 || !ixExists(t, m, e2.String()) {
		t.Errorf("the state names %s, want %s, which must exist", named, e2)
	}
	spy.noViolations(t)
}

func TestAnEntryOfADeletedActorIsRemovedWithoutRunningIt(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		spy := newIxSpy(t, b)
		id := ixOneshot("deleted")
		cLog := &ixDeliveries{}
		a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
		ixNode(t, spy, "c", t.TempDir(), ixConfig{class: oneshotClass, log: cLog})
		t1 := time.Now().Add(time.Second).UnixMilli()
		ixSet(t, nil, a, id, node.ExecDurable, t1)
		_, e1 := ixNamed(t, b, id)
		if err := a.Delete(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		ev := cLog.wait(t, id, "the deleted actor's entry delivered", func(ev node.DeliveryEvent) bool { return ev.TimerAt == t1 })
		if ev.Err != nil || ev.Event.Ran || ev.Outcome != alarmindex.OutcomeNoState {
			t.Fatalf("the delivery: err %v, ran %v, outcome %v; want the entry of an actor with no state removed without running it", ev.Err, ev.Event.Ran, ev.Outcome)
		}
		if len(ev.Deleted) != 1 || ev.Deleted[0] != e1.String() {
			t.Errorf("deleted %v, want %s", ev.Deleted, e1)
		}
		if got := ixEntries(t, b, id); len(got) != 0 {
			t.Errorf("index entries %v, want none", got)
		}
		if _, db, ok := ixState(t, b, id); ok && (db.inited || db.alarm != nil) {
			t.Errorf("the deleted actor has state again: %+v", db)
		}
		spy.noViolations(t)
	})
}

func TestAfterAFailedFirstUploadAnUnchangedAlarmCostsNoRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("rejoin")
	dir := t.TempDir()
	t1 := time.Now().Add(time.Hour).UnixMilli()
	solo, err := node.New(ctx, node.Config{DataDir: dir, Classes: ixClasses(t, oneshotClass)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := solo.Request(ctx, id, setBody(t1)); err != nil {
		t.Fatal(err)
	}
	if err := solo.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// j joins, but the actor's first snapshot fails: it stays on j only.
	faults.set(func(op bucket.Op) bucket.Fault {
		if isStatePut(op) {
			return bucket.Fault{Err: errInjected}
		}
		return bucket.Fault{}
	})
	j := ixNode(t, spy, "j", dir, ixConfig{steady: true, class: oneshotClass, noStart: true})
	faults.set(nil)
	if s := latestOrZero(t, m, id); s.Key != "" {
		t.Fatalf("the failed first upload left state %s", s.Key)
	}

	// Meanwhile another node creates the actor in the bucket.
	bn := ixNode(t, spy, "b", t.TempDir(), ixConfig{steady: true, class: oneshotClass, noStart: true})
	ixSet(t, nil, bn, id, node.ExecDurable, t1+1000)
	_, named := ixNamed(t, m, id)
	if err := bn.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// j takes the actor from the bucket: its uploads are ordinary ones now,
	// so an event that leaves the alarm alone costs no index request.
	spy.counts()
	ixSet(t, nil, j, id, node.ExecDurable, t1+1000)
	spy.expect(t, "an event that leaves the restored alarm alone", 0, 0)
	if _, e := ixNamed(t, m, id); e != named {
		t.Errorf("the state names %s, want %s, which stands for the unchanged alarm", e, named)
	}
	spy.noViolations(t)
}

func TestAHoldFromBeforeALeaseLapseListsNothing(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("lapse")
	t1 := time.Now().Add(time.Hour).UnixMilli()
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
	bn := ixNode(t, spy, "b", t.TempDir(), ixConfig{class: oneshotClass, noStart: true})
	ixSet(t, nil, a, id, node.ExecDurable, t1)

	// a's lease renewals fail until b has taken the actor over.
	var cut atomic.Bool
	cut.Store(true)
	faults.set(func(op bucket.Op) bucket.Fault {
		if cut.Load() && op.Kind == bucket.OpPut && op.Key == "cluster/nodes/a" {
			return bucket.Fault{Err: errInjected}
		}
		return bucket.Fault{}
	})
	takeOver(t, bn, id, setBody(t1+1000))
	before, named := ixNamed(t, m, id)
	cut.Store(false)
	waitFor(t, "a's lease valid again, in a new epoch", a.Leases().Valid)

	// a's hold is void: an event there must not run under it, list an
	// entry under its generation or upload.
	spy.counts()
	_, err := a.Exec(context.Background(), id, setBody(t1+2000), node.ExecDurable)
	var held *cluster.HeldElsewhereError
	if !errors.As(err, &held) || held.NodeID != "b" {
		t.Errorf("the event on a: %v; want the actor held by b", err)
	}
	spy.expect(t, "an event on a void hold", 0, 0)
	if s, e := ixNamed(t, m, id); s != before || e != named {
		t.Errorf("the state is %s naming %s; want %s naming %s", s.Key, e, before.Key, named)
	}
	if got := ixEntries(t, m, id); len(got) != 1 || got[0] != named {
		t.Errorf("index entries %v, want only %s", got, named)
	}
	spy.noViolations(t)
}
