package inspect_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/statetest"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

const prefix = "app/"

type counterNonces struct{ n int }

func (c *counterNonces) Next() string { c.n++; return fmt.Sprintf("%x", 0xb0+c.n) }

// cluster starts one node (its timer not running, so alarms stay pending)
// under prefix and sets the alarm of each actor to its due time through
// exec-durable requests, 16 at a time.
func cluster(t testing.TB, b bucket.Bucket, due map[abi.ActorID]int64) {
	t.Helper()
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Logger: hclog.NewNullLogger(),
		Cluster: &node.ClusterConfig{Bucket: b, Prefix: prefix, NodeID: "n1", Addr: "n1.invalid:1",
			LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second, IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Crash() }) // leave the actors as they are
	ids := make(chan abi.ActorID)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			var first error
			for id := range ids {
				if _, err := n.Exec(ctx, id, binary.LittleEndian.AppendUint64(nil, uint64(due[id])), node.ExecDurable); err != nil && first == nil {
					first = fmt.Errorf("actor %s: %w", id, err)
				}
			}
			errs <- first
		}()
	}
	for id := range due {
		ids <- id
	}
	close(ids)
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func onBoth(t *testing.T, f func(t *testing.T, b bucket.Bucket)) {
	t.Run("mem", func(t *testing.T) { f(t, bucket.NewMem()) })
	t.Run("s3", func(t *testing.T) { f(t, s3test.Start(t).Bucket) })
}

func actor(tenant, name string) abi.ActorID {
	return abi.ActorID{Tenant: tenant, Class: "oneshot", Name: name}
}

// The index doctor on a healthy cluster, then with an entry removed by
// hand (it fails, naming the actor), mended by backfill (it passes again),
// with its cost in requests counted exactly; extra entries are explained.
func TestVerifyFindsAMissingEntryAndBackfillMendsIt(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		base := time.Now().Add(time.Hour).UnixMilli()
		due := map[abi.ActorID]int64{}
		for i := range 5 {
			due[actor("t", fmt.Sprint(i))] = base + int64(i)
		}
		due[actor("u", "x")] = base + 100
		cluster(t, b, due)

		c := inspect.New(b, prefix)
		rep, err := c.Verify(ctx, inspect.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || rep.Actors != 6 || rep.Alarms != 6 || rep.Named != 6 || rep.Entries != 6 || len(rep.Extra) != 0 || len(rep.Nested) != 0 {
			t.Fatalf("healthy cluster: %+v", rep)
		}
		// One delimited LIST for the tenants, one LIST per tenant, one of
		// the state; per actor, a GET of its ownership record, a HEAD of
		// its holder's snapshot (the record, written when the actor was
		// taken, names no upload) and a GET of the snapshot; for keys that
		// are also folders, a LIST of every key; nothing written.
		if want := (bucket.Counts{List: 5, ListPages: 5, Get: 12, Head: 6}); rep.Requests != want {
			t.Errorf("verify sent %+v, want %+v", rep.Requests, want)
		}

		victim := actor("t", "3")
		info, err := c.Actor(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		if info.AlarmMs == nil || *info.AlarmMs != due[victim] || !info.NamedExists || info.Hold == nil || info.Hold.NodeID != "n1" || info.Generation != info.Hold.Generation {
			t.Fatalf("actor inspect: %+v (hold %+v)", info, info.Hold)
		}
		if err := b.Delete(ctx, info.Named); err != nil { // by hand
			t.Fatal(err)
		}
		rep, err = c.Verify(ctx, inspect.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() || len(rep.Missing) != 1 || rep.Missing[0].Actor != victim || rep.Missing[0].Named != info.Named {
			t.Fatalf("after removing %s by hand: missing %+v, want that actor, naming it", info.Named, rep.Missing)
		}

		before := c.Requests()
		br, err := c.Backfill(ctx, &counterNonces{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(br.Put, []string{info.Named}) || br.Alarms != 6 {
			t.Fatalf("backfill listed %v (of %d alarms), want the named entry %s again", br.Put, br.Alarms, info.Named)
		}
		if got := c.Requests(); got.Delete != before.Delete || got.Put != before.Put+1 {
			t.Errorf("backfill sent %d PUTs and %d DELETEs, want 1 and none", got.Put-before.Put, got.Delete-before.Delete)
		}
		rep, err = c.Verify(ctx, inspect.VerifyOptions{})
		if err != nil || !rep.OK() || rep.Named != 6 {
			t.Fatalf("after backfill: %+v, %v", rep, err)
		}

		// Extra entries, and why they are there.
		ix := bucket.WithPrefix(b, prefix)
		stale := alarmindex.Key{Actor: actor("t", "1"), DueMs: base - 5000, Tag: alarmindex.Tag{Generation: 1, Nonce: "01"}}
		ghost := alarmindex.Key{Actor: actor("t", "ghost"), DueMs: base, Tag: alarmindex.Tag{Generation: 1, Nonce: "02"}}
		older := alarmindex.Key{Actor: actor("u", "x"), DueMs: base + 100, Tag: alarmindex.Tag{Generation: 0, Nonce: "03"}}
		unserved := alarmindex.Key{Actor: abi.ActorID{Tenant: "t", Class: "gone", Name: "g"}, DueMs: base, Tag: alarmindex.Tag{Generation: 1, Nonce: "04"}}
		for _, k := range []alarmindex.Key{stale, ghost, older, unserved} {
			if _, err := ix.Put(ctx, k.String(), nil, bucket.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
		rep, err = c.Verify(ctx, inspect.VerifyOptions{Serves: func(class string) bool { return class == "oneshot" }})
		if err != nil || !rep.OK() {
			t.Fatalf("with extra entries: %+v, %v", rep, err)
		}
		got := map[string]string{}
		for _, x := range rep.Extra {
			got[x.Object] = x.Reason
		}
		want := map[string]string{
			prefix + stale.String():    inspect.ReasonStale,
			prefix + ghost.String():    inspect.ReasonNoState,
			prefix + older.String():    inspect.ReasonOlderGeneration,
			prefix + unserved.String(): inspect.ReasonUnservedClass,
		}
		if !mapsEqual(got, want) {
			t.Errorf("extra entries %v, want %v", got, want)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// alarms list: by tenant, class and due time, in due order per tenant.
func TestAlarmsList(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		base := time.Now().Add(time.Hour).UnixMilli()
		due := map[abi.ActorID]int64{actor("a", "1"): base + 30, actor("a", "2"): base + 10, actor("b", "1"): base + 20}
		cluster(t, b, due)
		c := inspect.New(b, prefix)
		names := func(f inspect.Filter) []string {
			t.Helper()
			es, bad, err := c.Alarms(ctx, f)
			if err != nil || len(bad) != 0 {
				t.Fatalf("Alarms(%+v): %v, malformed %v", f, err, bad)
			}
			var out []string
			for _, e := range es {
				out = append(out, e.Name)
			}
			return out
		}
		for _, tc := range []struct {
			f    inspect.Filter
			want []string
		}{
			{inspect.Filter{}, []string{"a/oneshot/2", "a/oneshot/1", "b/oneshot/1"}},
			{inspect.Filter{Tenant: "b"}, []string{"b/oneshot/1"}},
			{inspect.Filter{Class: "other"}, nil},
			{inspect.Filter{DueAfter: base + 20}, []string{"a/oneshot/1", "b/oneshot/1"}},
			{inspect.Filter{DueBefore: base + 20}, []string{"a/oneshot/2", "b/oneshot/1"}},
			{inspect.Filter{DueAfter: base + 11, DueBefore: base + 29}, []string{"b/oneshot/1"}},
		} {
			if got := names(tc.f); !slices.Equal(got, tc.want) {
				t.Errorf("Alarms(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		}
	})
}

// replacing is a bucket on which the first GET of each snapshot acts as if
// a live node took the actor over just before it and uploaded: the
// snapshot is uploaded again as the next hold's, the ownership record
// names that hold and its snapshot, the one asked for is deleted, and the
// GET finds nothing.
type replacing struct {
	bucket.Bucket
	t        testing.TB
	mu       sync.Mutex // the doctor reads states concurrently
	replaced map[string]bool
}

func (r *replacing) Get(ctx context.Context, key string) ([]byte, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !strings.HasPrefix(key, prefix+"state/") || r.replaced[key] {
		return r.Bucket.Get(ctx, key)
	}
	body, _, err := r.Bucket.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	dir, name := path.Split(key)
	g, _, _ := strings.Cut(name, "-")
	gen, _ := strconv.ParseUint(g, 10, 64)
	parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(dir, prefix+"state/"), "/"), "/")
	hexName, _ := hex.DecodeString(parts[2])
	id := abi.ActorID{Tenant: parts[0], Class: parts[1], Name: string(hexName)}
	newer := statetest.Plant(r.t, r.Bucket, prefix, id, gen+1, body)
	r.replaced[key], r.replaced[newer] = true, true
	if err := r.Bucket.Delete(ctx, key); err != nil {
		return nil, "", err
	}
	return r.Bucket.Get(ctx, key)
}

// The doctor beside a live cluster: a snapshot replaced between the
// doctor's LIST and its GET is read again at its newest, rather than
// failing the whole check (found by the chaos soak, where every run of
// keepctl verify on a busy cluster failed so).
func TestVerifyReadsASnapshotReplacedDuringTheCheck(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		base := time.Now().Add(time.Hour).UnixMilli()
		due := map[abi.ActorID]int64{}
		for i := range 3 {
			due[actor("t", fmt.Sprint(i))] = base + int64(i)
		}
		cluster(t, b, due)
		r := &replacing{Bucket: b, t: t, replaced: map[string]bool{}}
		rep, err := inspect.New(r, prefix).Verify(ctx, inspect.VerifyOptions{})
		if err != nil {
			t.Fatalf("verify while every snapshot is replaced under it: %v", err)
		}
		if !rep.OK() || rep.Actors != 3 || rep.Alarms != 3 || rep.Named != 3 {
			t.Fatalf("report %+v: want 3 actors, 3 alarms, each with its named entry", rep)
		}
		if len(r.replaced) != 6 {
			t.Fatalf("%d snapshots replaced and added, want 3 of each (the wrapper did not run)", len(r.replaced))
		}
	})
}

// minioLike is a bucket that lists a key that is both an object and a
// folder as MinIO does: a listing leaves out the keys under an object, even
// a listing of the object's own folder (a GET still finds them).
type minioLike struct{ bucket.Bucket }

func (m minioLike) List(ctx context.Context, pfx, startAfter string, limit int) ([]string, error) {
	all, err := m.Bucket.List(ctx, pfx, startAfter, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	var out []string
keys:
	for _, k := range all {
		for i := max(len(pfx)-1, 0); i < len(k); i++ {
			if k[i] != '/' {
				continue
			}
			if _, _, err := m.Bucket.Get(ctx, k[:i]); err == nil {
				continue keys // under an object: hidden
			}
		}
		if out = append(out, k); len(out) == limit {
			break
		}
	}
	return out, nil
}

// The doctor reports a key that is both an object and the folder of other
// keys: here an object at an entry's time folder, which on MinIO hides the
// entry from every sweep. The memory bucket lists both; on a store that
// hides the keys under the object (MinIO, played by minioLike), the alarm
// is missing, and the doctor finds its named entry, under the object, with
// a GET. A store that refuses such a key (versitygw answers 409) has
// nothing to report. A healthy cluster has none on any of them.
func TestVerifyReportsAKeyThatIsAlsoAFolder(t *testing.T) {
	// hides: whether the store hides the entry (nil: either, as it does).
	run := func(t *testing.T, b bucket.Bucket, hides *bool) {
		ctx := context.Background()
		due := time.Now().Add(time.Hour).UnixMilli()
		victim := actor("t", "v")
		cluster(t, b, map[abi.ActorID]int64{victim: due, actor("t", "w"): due + 1})
		c := inspect.New(b, prefix)
		if rep, err := c.Verify(ctx, inspect.VerifyOptions{}); err != nil || !rep.OK() || len(rep.Nested) != 0 {
			t.Fatalf("healthy cluster: %+v, %v", rep, err)
		}
		info, err := c.Actor(ctx, victim)
		if err != nil || info.Named == "" {
			t.Fatalf("actor inspect: %+v, %v", info, err)
		}
		folder := prefix + alarmindex.TimePrefix("t", due)
		object := strings.TrimSuffix(folder, "/")
		if _, err := b.Put(ctx, object, []byte("stray"), bucket.Cond{}); err != nil {
			// versitygw keeps objects as files: a key cannot be a file
			// and a directory at once.
			t.Logf("the store refuses an object at %s, the folder of %s: %v", object, info.Named, err)
			if rep, err := c.Verify(ctx, inspect.VerifyOptions{}); err != nil || !rep.OK() || len(rep.Nested) != 0 {
				t.Fatalf("after the refused PUT: %+v, %v", rep, err)
			}
			return
		}
		// Whether the store hides the entry now, as MinIO does.
		listed, err := b.List(ctx, prefix+alarmindex.TenantPrefix("t"), "", 1000)
		if err != nil {
			t.Fatal(err)
		}
		hidden := !slices.Contains(listed, info.Named)
		t.Logf("an object at %s: the store lists %v (the entry hidden: %v)", object, listed, hidden)
		if hides != nil && hidden != *hides {
			t.Errorf("the store hides the entry: %v, want %v", hidden, *hides)
		}
		rep, err := c.Verify(ctx, inspect.VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []inspect.Nested{{Object: object, Under: info.Named, Hidden: hidden}}
		if rep.OK() || !slices.Equal(rep.Nested, want) {
			t.Fatalf("an object at %s: nested %+v (ok %v), want %+v", object, rep.Nested, rep.OK(), want)
		}
		if hidden != (len(rep.Missing) == 1 && rep.Missing[0].Actor == victim) {
			t.Errorf("missing %+v; hidden %v: the alarm is missing exactly when its entry is hidden", rep.Missing, hidden)
		}
		if !slices.Contains(rep.Malformed, object) {
			t.Errorf("malformed %v: want %s among them", rep.Malformed, object)
		}
	}
	no, yes := false, true
	t.Run("mem", func(t *testing.T) { run(t, bucket.NewMem(), &no) })
	t.Run("mem-hiding", func(t *testing.T) { run(t, minioLike{bucket.NewMem()}, &yes) })
	t.Run("s3", func(t *testing.T) {
		// MinIO (make test-minio) stores the object and hides the entry,
		// S3 lists both, versitygw refuses the object: the doctor reports
		// what the store does.
		run(t, s3test.Start(t).Bucket, nil)
	})
}
