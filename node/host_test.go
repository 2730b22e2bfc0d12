package node_test

// Host-level tests of cluster mode: replication keys and restores, late
// uploads from an earlier holder, failed uploads, clean shutdown and idle
// release, joining with local data, the event kinds, on-init and delete.
// Most run on both the in-memory bucket and versitygw.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// hostConfig is what a host test varies about a cluster node.
type hostConfig struct {
	ttl, margin, grace time.Duration // default 10 s, 1 s, 2 s: no lease expires during a test
	read               time.Duration // how often the leases are read (default TTL/3)
	idle               time.Duration // default 1 h
	addr               string        // default <name>.invalid:1
	start              bool          // run the timer, reaper and sweeps
	log                io.Writer     // also gets the node's log lines
	security           node.Security // tokens and TLS (default: an open API)
	registerer         prometheus.Registerer
	failoverWait       time.Duration // default: the node's own
	admission          node.Admission
	engine             []engine.Option // the engine's options (the attempts, the backoff)
	tracer             trace.TracerProvider
}

// startHost starts a cluster node on b with data in dir, closed when the
// test ends (a second Close is harmless).
func startHost(t testing.TB, b bucket.Bucket, name, dir string, classes map[string][]byte, hc hostConfig) *node.Node {
	t.Helper()
	if hc.idle == 0 {
		hc.idle = time.Hour
	}
	if hc.addr == "" {
		hc.addr = name + ".invalid:1"
	}
	var out io.Writer = testWriter{t}
	if hc.log != nil {
		out = io.MultiWriter(out, hc.log)
	}
	n, err := node.New(context.Background(), node.Config{
		DataDir: dir, Classes: classes, Security: hc.security, Registerer: hc.registerer, Admission: hc.admission,
		EngineOptions: hc.engine, TracerProvider: hc.tracer,
		Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: out}),
		Cluster: &node.ClusterConfig{
			Bucket: b, NodeID: name, Addr: hc.addr,
			LeaseTTL: hc.ttl, LeaseMargin: hc.margin, LeaseGrace: hc.grace, LeaseReadPeriod: hc.read,
			IdleTimeout: hc.idle, SweepPeriod: time.Hour, FailoverWait: hc.failoverWait,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if hc.start {
		n.Start(context.Background())
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// Tests that need no fault injection run on versitygw; those that do run
// on the in-memory bucket. Compiling a Go guest takes about a second, so
// each node serves only the class its test needs.

func scripted(t testing.TB) map[string][]byte {
	return map[string][]byte{"s": testguest.Build(t, testguest.Scripted)}
}

// do runs a request event and returns the response as text.
func do(t *testing.T, n *node.Node, id abi.ActorID, kind node.EventKind, req string) string {
	t.Helper()
	r, err := n.Exec(context.Background(), id, []byte(req), kind)
	if err != nil {
		t.Fatalf("%q on actor %s: %v", req, id, err)
	}
	return string(r.Response)
}

// snapshots lists the actor's snapshots in the bucket, oldest first.
func snapshots(t *testing.T, b bucket.Bucket, id abi.ActorID) []cluster.Snapshot {
	t.Helper()
	s, err := cluster.NewReplica(b, "cluster/").List(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// latest is the actor's newest snapshot, as its ownership record names it.
func latest(t *testing.T, b bucket.Bucket, id abi.ActorID) cluster.Snapshot {
	t.Helper()
	s, ok, err := cluster.ReadState(context.Background(), b, "cluster/", id)
	if err != nil || !ok {
		t.Fatalf("the bucket has no state of actor %s (%v)", id, err)
	}
	return s
}

func TestReplicationOrdersSnapshotsAndATakerRestoresTheNewest(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	classes := scripted(t)
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "r"}
	dirA := t.TempDir()
	a := startHost(t, b, "a", dirA, classes, hostConfig{})
	for _, v := range []string{"1", "2", "3"} {
		do(t, a, id, node.ExecDurable, "put k a"+v)
	}
	// Each upload of a hold overwrites the hold's one key: nothing to
	// prune within a hold.
	if got := snapshots(t, b, id); len(got) != 1 || got[0].Generation != 1 || got[0].Seq != 0 {
		t.Fatalf("after three events under the first hold the bucket has %+v, want the hold's one snapshot", got)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	bn := startHost(t, b, "b", t.TempDir(), classes, hostConfig{})
	if v := do(t, bn, id, node.ExecDurable, "getkv k"); v != "a3" {
		t.Fatalf("the next holder read %q, want a3 restored from the bucket", v)
	}
	if s := latest(t, b, id); s.Generation != 2 || s.Seq != 0 {
		t.Fatalf("the next holder's upload is %+v, want generation 2's", s)
	}
	// The first hold's snapshot is pruned in the background, off the
	// reply path, once the next hold's is in the bucket.
	waitFor(t, "the replaced snapshot pruned", func() bool {
		got := snapshots(t, b, id)
		return len(got) == 1 && got[0].Generation == 2
	})
	do(t, bn, id, node.ExecDurable, "put k b1")
	if err := bn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The first node's data directory, opened by a new process, holds
	// a3 with a sidecar naming the first hold's snapshot: older than the
	// bucket's newest, which the new holder restores over it.
	a2 := startHost(t, b, "a2", dirA, classes, hostConfig{})
	if v := do(t, a2, id, node.ExecDurable, "getkv k"); v != "b1" {
		t.Fatalf("a node on the first holder's data read %q, want b1 from the bucket", v)
	}
	if s := latest(t, b, id); s.Generation != 3 || s.Seq != 0 {
		t.Fatalf("the third holder's upload is %+v, want generation 3's", s)
	}
}

// stateFaults is a Mem fault hook aimed at PUTs of actor snapshots: the
// test arms the fault the next such PUT gets.
type stateFaults struct {
	mu   sync.Mutex
	next *bucket.Fault
}

func (f *stateFaults) arm(fault bucket.Fault) { f.mu.Lock(); f.next = &fault; f.mu.Unlock() }

func (f *stateFaults) hook(op bucket.Op) bucket.Fault {
	if op.Kind != bucket.OpPut || !strings.HasPrefix(op.Key, "cluster/state/") {
		return bucket.Fault{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		return bucket.Fault{}
	}
	fault := *f.next
	f.next = nil
	return fault
}

// An upload from an earlier holder that lands after a takeover becomes the
// state if and only if the new holder has not uploaded yet (a late commit's
// late commit): the records name the new holder's snapshot once it
// uploaded, and until then the earlier hold's key, which the late upload
// overwrites.
func TestALateUploadFromAnEarlierHolderBecomesTheStateOnlyIfNothingNewerExists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		newHolderPuts bool // the new holder uploads before the late PUT lands
		want          string
	}{
		{"before the new holder uploaded", false, "a2"},
		{"after the new holder uploaded", true, "b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := bucket.NewMem()
			var faults stateFaults
			mem.Faults = faults.hook
			classes := scripted(t)
			id := abi.ActorID{Tenant: "t", Class: "s", Name: "late"}

			a := startHost(t, mem, "a", t.TempDir(), classes, hostConfig{})
			do(t, a, id, node.ExecDurable, "put k a1")
			faults.arm(bucket.Fault{Late: true})
			_, err := a.Exec(ctx, id, []byte("put k a2"), node.ExecDurable)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("exec-durable whose upload timed out: %v, want the timeout", err)
			}
			if late := mem.Late(); len(late) != 1 || late[0].Key != replica(id, 1, 0) {
				t.Fatalf("held requests %+v, want the PUT of the first hold's snapshot", late)
			}

			// The failed upload gave the actor up, so b takes it at once
			// (a's lease is valid for seconds yet) and restores a1, the
			// last upload a confirmed, which its release names.
			bn := startHost(t, mem, "b", t.TempDir(), classes, hostConfig{})
			if _, err := bn.State(ctx, id); err != nil {
				t.Fatalf("taking the actor after the holder gave it up: %v", err)
			}
			if tc.newHolderPuts {
				do(t, bn, id, node.ExecDurable, "put k b1")
			}
			if n := mem.ApplyLate(); n != 1 {
				t.Fatalf("applied %d late requests, want 1", n)
			}
			if err := bn.Close(ctx); err != nil {
				t.Fatal(err)
			}
			c := startHost(t, mem, "c", t.TempDir(), classes, hostConfig{})
			if v := do(t, c, id, node.ExecDurable, "getkv k"); v != tc.want {
				t.Fatalf("the next holder read %q, want %q (snapshots were %v)", v, tc.want, mem.Keys())
			}
		})
	}
}

// An upload that returns after its hold lapsed prunes nothing: by then
// another node may have taken the actor and noted the snapshot before it
// as the state (the upload had not landed when it looked), and deleting
// that snapshot would leave the records naming one that is gone. Here a's
// first upload is held up at the bucket while a is cut off from renewing
// its lease; b takes the actor over and restores the first hold's
// snapshot; a's upload then lands and returns. That snapshot must stay,
// and the next holder restores it (a's write was never acknowledged).
func TestAnUploadThatReturnsAfterItsHoldLapsedPrunesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "lapse"}
	l := lapseDuringUpload(t, id, func(a *node.Node) error {
		_, err := a.Exec(ctx, id, []byte("put k v2"), node.ExecDurable)
		return err
	})
	if l.err == nil {
		t.Fatal("a's exec-durable whose upload returned after its hold lapsed succeeded")
	}
	l.a.FlushDeletes(ctx)
	first := replica(id, 1, 0)
	if _, _, ok := l.mem.Object(first); !ok {
		t.Fatalf("the snapshot %s, which b's hold names as the state, was deleted by a's late upload", first)
	}
	if err := l.b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := startHost(t, l.mem, "c", t.TempDir(), l.classes, hostConfig{})
	if v := do(t, c, id, node.ExecDurable, "getkv k"); v != "v1" {
		t.Fatalf("the next holder read %q, want v1", v)
	}
}

// lapsed is what lapseDuringUpload leaves: op's error, the bucket, the
// nodes a and b, and the guests.
type lapsed struct {
	err     error
	mem     *bucket.Mem
	a, b    *node.Node
	classes map[string][]byte
}

// lapseDuringUpload runs op on node a, which takes actor id (v1, written
// by node z, which let it go), while a's first upload of an actor's state
// is held up 6 s at the bucket and a is cut off from renewing its lease
// (1 s): node b takes the actor over, restoring v1, before that upload
// returns. It returns once op did.
func lapseDuringUpload(t *testing.T, id abi.ActorID, op func(a *node.Node) error) lapsed {
	t.Helper()
	ctx := context.Background()
	mem := bucket.NewMem()
	var slow, cut atomic.Bool
	mem.Faults = func(op bucket.Op) bucket.Fault {
		switch {
		case cut.Load() && op.Kind == bucket.OpPut && op.Key == "cluster/nodes/a":
			return bucket.Fault{Err: errors.New("injected: a is cut off from the bucket")}
		case slow.Load() && op.Kind == bucket.OpPut && strings.HasPrefix(op.Key, "cluster/state/"):
			slow.Store(false)
			return bucket.Fault{Delay: 6 * time.Second}
		}
		return bucket.Fault{}
	}
	classes := scripted(t)
	hc := hostConfig{ttl: time.Second, margin: 300 * time.Millisecond, grace: 300 * time.Millisecond}
	z := startHost(t, mem, "z", t.TempDir(), classes, hc)
	do(t, z, id, node.ExecDurable, "put k v1")
	if err := z.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := startHost(t, mem, "a", t.TempDir(), classes, hc)
	bn := startHost(t, mem, "b", t.TempDir(), classes, hc)
	slow.Store(true)
	done := make(chan error, 1)
	go func() { done <- op(a) }()
	waitFor(t, "a's upload held up at the bucket", func() bool { return !slow.Load() })
	cut.Store(true)
	waitFor(t, "b taking the actor over", func() bool {
		_, err := bn.State(ctx, id)
		return err == nil
	})
	return lapsed{err: <-done, mem: mem, a: a, b: bn, classes: classes}
}

// replica names the snapshot key of (generation, seq).
func replica(id abi.ActorID, generation, seq uint64) string {
	return cluster.NewReplica(nil, "cluster/").Key(id, generation, seq)
}

// A failed upload gives the actor up: the hold goes at once, and the local
// database, which has writes the bucket lacks, is not trusted again.
func TestAFailedUploadGivesTheActorUp(t *testing.T) {
	t.Parallel()
	for _, kind := range []node.EventKind{node.ExecDurable, node.Exec} {
		name := map[node.EventKind]string{node.Exec: "exec", node.ExecDurable: "exec-durable"}[kind]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem := bucket.NewMem()
			var faults stateFaults
			mem.Faults = faults.hook
			classes := scripted(t)
			id := abi.ActorID{Tenant: "t", Class: "s", Name: "fails"}
			dirA := t.TempDir()
			reg := prometheus.NewRegistry()
			a := startHost(t, mem, "a", dirA, classes, hostConfig{registerer: reg})
			do(t, a, id, node.ExecDurable, "put k v1")
			faults.arm(bucket.Fault{Err: errors.New("injected: the store refused the upload")})
			_, err := a.Exec(ctx, id, []byte("put k v2"), kind)
			if kind == node.ExecDurable && (err == nil || !strings.Contains(err.Error(), "injected")) {
				t.Fatalf("exec-durable whose upload failed: %v, want the upload's error", err)
			}
			if kind == node.Exec && err != nil {
				t.Fatalf("exec replies before it replicates: %v", err)
			}
			// Another node takes the actor as soon as a lets it go (a's
			// lease stays valid: without the release b would be refused).
			bn := startHost(t, mem, "b", t.TempDir(), classes, hostConfig{})
			var v string
			waitFor(t, "the holder giving the actor up", func() bool {
				r, err := bn.Exec(ctx, id, []byte("getkv k"), node.ExecDurable)
				var held *cluster.HeldElsewhereError
				if errors.As(err, &held) {
					return false
				}
				if err != nil {
					t.Fatal(err)
				}
				v = string(r.Response)
				return true
			})
			if v != "v1" {
				t.Fatalf("the next holder read %q, want v1: the bucket's state", v)
			}
			if got := gathered(t, reg, "wasmkeep_node_actors_given_up_total"); got != 1 {
				t.Fatalf("a's actors given up = %v, want 1", got)
			}
			do(t, bn, id, node.ExecDurable, "put k b")
			if err := bn.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// a's local database holds v2, which never reached the bucket;
			// taking the actor again, a restores the bucket's state.
			if v := do(t, a, id, node.ExecDurable, "getkv k"); v != "b" {
				t.Fatalf("the node that gave the actor up read %q, want b from the bucket", v)
			}
		})
	}
}

// A clean shutdown uploads what is pending and releases every hold, so
// another node takes the actors at once, long before the lease could
// expire.
func TestACleanShutdownHandsActorsOverAtOnce(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	ctx := context.Background()
	classes := scripted(t)
	a := startHost(t, b, "a", t.TempDir(), classes, hostConfig{start: true})
	ids := []abi.ActorID{{Tenant: "t", Class: "s", Name: "x"}, {Tenant: "t", Class: "s", Name: "y"}, {Tenant: "u", Class: "s", Name: "z/1"}}
	for _, id := range ids {
		do(t, a, id, node.Exec, "put k from-a") // plain exec: the upload may still be pending at Close
	}
	bn := startHost(t, b, "b", t.TempDir(), classes, hostConfig{})
	var held *cluster.HeldElsewhereError
	if _, err := bn.Exec(ctx, ids[0], []byte("getkv k"), node.ExecDurable); !errors.As(err, &held) || held.NodeID != "a" {
		t.Fatalf("while a runs: %v, want the actor held by a", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Each ownership record says released (no node), and a's lease is gone:
	// either lets another node in at once, and a clean shutdown does both.
	for _, id := range ids {
		key := "cluster/holds/" + id.Path()
		body, _, err := b.Get(ctx, key)
		var rec struct {
			NodeID     string `json:"node_id"`
			Generation uint64 `json:"generation"`
		}
		if err != nil || json.Unmarshal(body, &rec) != nil || rec.NodeID != "" || rec.Generation != 1 {
			t.Fatalf("actor %s's ownership record after a's shutdown: %s %v, want released at generation 1", id, body, err)
		}
	}
	if keys, err := b.List(ctx, "cluster/nodes/a", "", 10); err != nil || len(keys) != 0 {
		t.Fatalf("a's lease after its shutdown: %v %v, want it deleted", keys, err)
	}
	for _, id := range ids {
		if v := do(t, bn, id, node.ExecDurable, "getkv k"); v != "from-a" {
			t.Fatalf("actor %s after a's shutdown: %q, want from-a", id, v)
		}
	}
}

// An actor no event reached for the idle timeout is released while its
// node lives on.
func TestAnIdleActorIsReleased(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	ctx := context.Background()
	classes := scripted(t)
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "idle"}
	bn := startHost(t, b, "b", t.TempDir(), classes, hostConfig{})
	a := startHost(t, b, "a", t.TempDir(), classes, hostConfig{idle: time.Second, start: true})
	do(t, a, id, node.Exec, "put k v")
	var held *cluster.HeldElsewhereError
	if _, err := bn.Exec(ctx, id, []byte("getkv k"), node.ExecDurable); !errors.As(err, &held) {
		t.Fatalf("right after a's event: %v, want the actor held by a", err)
	}
	var v string
	waitFor(t, "a releasing the idle actor", func() bool {
		r, err := bn.Exec(ctx, id, []byte("getkv k"), node.ExecDurable)
		if errors.As(err, &held) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		v = string(r.Response)
		return true
	})
	if v != "v" {
		t.Fatalf("after the idle release b read %q, want v", v)
	}
	if !a.Leases().Valid() {
		t.Fatal("a's lease lapsed: the actor was taken over, not released")
	}
}

// A node that ran alone and joins a cluster uploads, as its first snapshot,
// each local actor the bucket lacks (with its alarm listed in the index
// first, R4), and leaves alone those the bucket has.
func TestJoiningWithLocalDataUploadsWhatTheBucketLacks(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	ctx := context.Background()
	classes := counter(t)
	mine := abi.ActorID{Tenant: "t", Class: "counter", Name: "mine"}
	other := abi.ActorID{Tenant: "t", Class: "counter", Name: "other/1"}
	shared := abi.ActorID{Tenant: "t", Class: "counter", Name: "shared"}

	// Another node of the cluster created "shared" (1 request).
	o := startHost(t, b, "o", t.TempDir(), classes, hostConfig{})
	get(t, o, shared)
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sharedKey := latest(t, b, shared).Key

	// A node running alone: mine has 2 requests and an alarm, other 1,
	// and its own "shared" 3.
	dir := t.TempDir()
	alone := newNode(t, dir, classes, node.Config{})
	do(t, alone, mine, node.ExecDurable, "start 3600000")
	for _, id := range []abi.ActorID{mine, other, shared, shared, shared} {
		get(t, alone, id)
	}
	if err := alone.Close(ctx); err != nil {
		t.Fatal(err)
	}

	j := startHost(t, b, "j", dir, classes, hostConfig{})
	for _, id := range []abi.ActorID{mine, other} {
		if s := latest(t, b, id); s.Generation != 1 || s.Seq != 0 {
			t.Fatalf("actor %s after joining: snapshot %+v, want its first hold's", id, s)
		}
	}
	if s := snapshots(t, b, shared); len(s) != 1 || s[0].Key != sharedKey {
		t.Fatalf("an actor the bucket had: snapshots %+v, want only %s (not uploaded again)", s, sharedKey)
	}
	entries, err := b.List(ctx, "cluster/alarms/t/", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !strings.Contains(entries[0], "/counter.t/") {
		t.Fatalf("alarm index after joining: %v, want one tagged entry for the local alarm (R4)", entries)
	}
	if err := j.Close(ctx); err != nil {
		t.Fatal(err)
	}

	c := startHost(t, b, "c", t.TempDir(), classes, hostConfig{})
	for _, tc := range []struct {
		id        abi.ActorID
		requests  int
		withAlarm bool
	}{{mine, 3, true}, {other, 2, false}, {shared, 2, false}} {
		if r := get(t, c, tc.id); r.Requests != tc.requests || (r.AlarmMs != nil) != tc.withAlarm {
			t.Fatalf("actor %s on another node after the join: %+v, want %d requests, alarm %v", tc.id, r, tc.requests, tc.withAlarm)
		}
	}
}

// exec replies once the event committed, before its upload; exec-durable
// replies only once the upload is in the bucket. The hold's uploads
// overwrite its one key, each If-Match the one before.
func TestExecRepliesBeforeTheUploadAndExecDurableAfterIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := bucket.NewMem()
	var gated atomic.Bool
	arrived := make(chan bucket.Op, 10)
	release := make(chan struct{})
	mem.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpPut && strings.HasPrefix(op.Key, "cluster/state/") && gated.Load() {
			arrived <- op
			<-release
		}
		return bucket.Fault{}
	}
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "kinds"}
	key := replica(id, 1, 0)
	a := startHost(t, mem, "a", t.TempDir(), scripted(t), hostConfig{})
	do(t, a, id, node.ExecDurable, "put k 1")
	_, first, ok := mem.Object(key)
	if !ok {
		t.Fatalf("exec-durable replied before the hold's snapshot %s was in the bucket", key)
	}

	// exec: the reply comes while the upload is held up.
	gated.Store(true)
	do(t, a, id, node.Exec, "put k 2")
	op := <-arrived
	if op.Key != key || op.Cond.IfMatch != first {
		t.Fatalf("upload of %s (%+v), want %s If-Match %s", op.Key, op.Cond, key, first)
	}
	if _, etag, _ := mem.Object(key); etag != first {
		t.Fatalf("the upload is held up, yet the bucket's snapshot changed (%s)", etag)
	}
	gated.Store(false)
	release <- struct{}{}

	// exec-durable: no reply until the upload is done, and then it is there.
	// The reply notes whether the snapshot had landed when it came; the
	// upload cannot land before the test releases it.
	type reply struct {
		err  error
		body []byte
	}
	done := make(chan reply, 1)
	gated.Store(true)
	go func() {
		_, err := a.Exec(ctx, id, []byte("put k 3"), node.ExecDurable)
		body, _, _ := mem.Object(key)
		done <- reply{err, body}
	}()
	op = <-arrived
	if op.Key != key {
		t.Fatalf("upload of %s, want %s", op.Key, key)
	}
	gated.Store(false)
	release <- struct{}{}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.Equal(r.body, op.Body) {
		t.Fatal("exec-durable replied before its upload landed")
	}
}

// on-init runs once per actor: its success is recorded in the database, so
// neither another node nor a restart runs it again; a deleted actor starts
// over, on-init included.
func TestOnInitIsRecordedOnceAcrossNodes(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	ctx := context.Background()
	classes := scripted(t)
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "init"}
	a := startHost(t, b, "a", t.TempDir(), classes, hostConfig{})
	if v := do(t, a, id, node.ExecDurable, "getkv inited"); v != "1" {
		t.Fatalf("first event: on-init's mark is %q, want 1", v)
	}
	// Overwrite on-init's mark: if on-init ran again, it would be back.
	do(t, a, id, node.Exec, "put inited 0")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	bn := startHost(t, b, "b", t.TempDir(), classes, hostConfig{})
	if v := do(t, bn, id, node.ExecDurable, "getkv inited"); v != "0" {
		t.Fatalf("on another node the mark is %q, want 0: on-init ran again", v)
	}
	if err := bn.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if v := do(t, bn, id, node.ExecDurable, "getkv inited"); v != "1" {
		t.Fatalf("after a delete the mark is %q, want 1: a fresh actor runs on-init", v)
	}
}

// Deleting an actor removes its state on every node: the bucket gets a
// tombstone, and a node with an older local copy starts the actor fresh.
func TestDeletingAnActorRemovesItEverywhere(t *testing.T) {
	t.Parallel()
	b := s3test.Start(t).Bucket
	ctx := context.Background()
	classes := counter(t)
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "doomed/1"}
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startHost(t, b, "a", dirA, classes, hostConfig{})
	do(t, a, id, node.ExecDurable, "start 3600000")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	bn := startHost(t, b, "b", dirB, classes, hostConfig{})
	if c := get(t, bn, id); c.Requests != 2 {
		t.Fatalf("on b before the delete: %+v, want 2 requests", c)
	}
	if err := bn.Close(ctx); err != nil {
		t.Fatal(err)
	}

	var warnings syncBuffer
	a2 := startHost(t, b, "a2", dirA, classes, hostConfig{log: &warnings})
	if err := a2.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(node.Path(dirA, id)); !os.IsNotExist(err) {
		t.Fatalf("the deleting node's database: %v, want it gone", err)
	}
	if a2.Timer().Len() != 0 {
		t.Fatalf("the deleting node's timer holds %d alarms, want none", a2.Timer().Len())
	}
	if s := latest(t, b, id); s.Generation != 3 {
		t.Fatalf("newest snapshot after the delete %+v, want the tombstone of generation 3", s)
	} else if body, _, err := b.Get(ctx, s.Key); err != nil || len(body) != 0 {
		t.Fatalf("newest snapshot after the delete: %d bytes, %v; want an empty tombstone", len(body), err)
	}
	// The deleting node starts the actor afresh too, as any node would;
	// it has not lost its lease, nor given the actor up.
	if c := get(t, a2, id); c.Requests != 1 || c.AlarmMs != nil {
		t.Fatalf("after the delete, on the deleting node: %+v, want a fresh actor", c)
	}
	if w := warnings.String(); strings.Contains(w, "giving the actor up") {
		t.Fatalf("the deleting node gave the actor up:\n%s", w)
	}
	if err := a2.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := a2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// b still has the actor's database from before the delete.
	b2 := startHost(t, b, "b2", dirB, classes, hostConfig{})
	if c := get(t, b2, id); c.Requests != 1 || c.AlarmMs != nil || c.IntervalMs != 0 {
		t.Fatalf("after the delete, on a node with an old copy: %+v, want a fresh actor", c)
	}
}

// syncBuffer collects log lines from a node's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
