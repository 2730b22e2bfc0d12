package inspect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
)

// Missing is an actor whose committed alarm has no entry in the index at
// its time: no node's sweep will find it, so it fires only if an event
// reaches the actor or a node that holds it is alive.
type Missing struct {
	Actor   abi.ActorID `json:"-"`
	Name    string      `json:"actor"`
	AlarmMs int64       `json:"alarm_ms"`
	// Named is the entry the state names ("" for none).
	Named string `json:"named_entry"`
}

// Extra is an index entry no actor's state names, and why it is there.
type Extra struct {
	Entry
	// Reason is one of the Reason constants; Detail says more.
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// Reasons for an extra entry.
const (
	// ReasonNoState: the bucket has no state for the actor (never
	// uploaded, or a joining node's entry whose first upload never landed).
	ReasonNoState = "no state"
	// ReasonDeleted: the actor was deleted (its latest state is a
	// tombstone); the entry is removed when it comes due.
	ReasonDeleted = "deleted actor"
	// ReasonStale: the committed alarm is at another time, or cleared; the
	// entry is removed when it comes due (R2).
	ReasonStale = "stale"
	// ReasonOlderGeneration: at the alarm's time, written by an earlier
	// hold than the named entry's (a crash between PUT and upload).
	ReasonOlderGeneration = "older generation"
	// ReasonUnnamed: at the alarm's time, not older, but not the one the
	// state names (a backfilled entry, or the PUT whose record failed).
	ReasonUnnamed = "unnamed at the alarm's time"
	// ReasonUnservedClass: no node serves the class (only when
	// VerifyOptions.Serves is set); it stays, and sweeps step past it.
	ReasonUnservedClass = "unserved class"
)

// Report is what Verify found.
type Report struct {
	// Actors with state in the bucket, Alarms among them with a committed
	// alarm, Entries in the index.
	Actors  int `json:"actors"`
	Alarms  int `json:"alarms"`
	Entries int `json:"entries"`
	// Named counts alarms whose named entry exists; Covered those listed
	// only by an unnamed entry at their time (they fire all the same).
	Named   int `json:"named"`
	Covered int `json:"covered"`
	// Missing are alarms with no entry at their time: the failures.
	Missing []Missing `json:"missing"`
	// Extra are the entries no state names.
	Extra []Extra `json:"extra"`
	// Malformed are keys under the index or the state that are neither.
	Malformed []string `json:"malformed,omitempty"`
	// Nested are the keys under the cluster's prefix that are both an
	// object and the folder of other keys (failures too).
	Nested []Nested `json:"nested"`
	// Requests are the requests the check sent: one LIST page per 1,000
	// tenants, per 1,000 entries and per 1,000 snapshots; for each actor
	// those listings found, a GET of its ownership record, at most a HEAD
	// of its hold's snapshot, and a GET of its newest snapshot; for the
	// nested keys, one LIST page per 1,000 keys under the
	// prefix, and a GET of a missing alarm's named entry when one of its
	// folders is an object.
	Requests bucket.Counts `json:"requests"`
}

// OK reports whether every committed alarm has an entry at its time and
// no key is both an object and the folder of others.
func (r Report) OK() bool { return len(r.Missing) == 0 && len(r.Nested) == 0 }

// Nested is a key that is both an object and the folder of other keys: an
// object at Object, and others under Object + "/". S3 and the memory
// bucket store and list both, and versitygw refuses to store the second;
// but MinIO stores it and leaves the keys under the object out of every
// listing, so an index entry under it is one no sweep sees, and a
// snapshot under it one no node restores.
type Nested struct {
	Object string `json:"object"`
	// Under is the first key under Object + "/".
	Under string `json:"under"`
	// Hidden says the store left Under out of its listings (as MinIO
	// does): it was found as the entry a missing alarm's state names.
	Hidden bool `json:"hidden,omitempty"`
}

// VerifyOptions tune Verify.
type VerifyOptions struct {
	// Serves reports whether some node serves a class (nil: every class);
	// entries of other classes are reported as ReasonUnservedClass.
	Serves func(class string) bool
	// Progress, if set, is called after every 100 actors read and after
	// the last, with how many were read of how many (from one goroutine
	// at a time).
	Progress func(done, total int)
	// Concurrency is how many actors' states are read at once (default
	// DefaultVerifyConcurrency): each is a GET and a SQLite open.
	Concurrency int
}

// DefaultVerifyConcurrency is how many states Verify reads at once when
// VerifyOptions.Concurrency is not set.
const DefaultVerifyConcurrency = 16

// scan is the index and the latest state of every actor.
type scan struct {
	entries map[abi.ActorID][]Entry
	total   int
	states  map[abi.ActorID]cluster.Snapshot
	bad     []string
}

func (c *Cluster) scan(ctx context.Context) (scan, error) {
	all, malformed, err := c.Alarms(ctx, Filter{})
	if err != nil {
		return scan{}, err
	}
	s := scan{entries: map[abi.ActorID][]Entry{}, total: len(all), bad: malformed}
	for _, e := range all {
		s.entries[e.Actor] = append(s.entries[e.Actor], e)
	}
	states, bad, err := c.latestStates(ctx)
	if err != nil {
		return scan{}, err
	}
	s.states, s.bad = states, append(s.bad, bad...)
	return s, nil
}

// Verify is the index doctor: for every actor with state in the bucket, it
// reads the latest state and checks that its committed alarm has an entry
// in the index at its time, and it explains every entry no state names.
// The cluster may run meanwhile: an actor changed during the check can
// show up as missing or extra, so check a failure again. It writes nothing.
func (c *Cluster) Verify(ctx context.Context, opts VerifyOptions) (Report, error) {
	before := c.b.Counts()
	s, err := c.scan(ctx)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Entries: s.total, Malformed: s.bad, Missing: []Missing{}, Extra: []Extra{}}
	explained := map[string]bool{}
	// The listings only find the actors: those with a snapshot key and
	// those with entries. Each one's state is read from its ownership
	// record (cluster.ReadState), since a listing may leave a key out.
	candidates := map[abi.ActorID]bool{}
	for id := range s.states {
		candidates[id] = true
	}
	for id := range s.entries {
		candidates[id] = true
	}
	ids := sortedActors(candidates)
	states, err := c.readStates(ctx, ids, opts)
	if err != nil {
		return rep, err
	}
	for i, id := range ids {
		st := states[i]
		mine := s.entries[id]
		if st.absent {
			for _, e := range mine {
				rep.Extra = append(rep.Extra, c.unserved(Extra{Entry: e, Reason: ReasonNoState}, opts))
			}
			continue
		}
		rep.Actors++
		if st.alarm != nil {
			rep.Alarms++
			at := *st.alarm
			named, covered := false, false
			for _, e := range mine {
				if e.DueMs != at {
					continue
				}
				covered = true
				if st.named != nil && e.key() == *st.named {
					named = true
					explained[e.Object] = true
				}
			}
			switch {
			case named:
				rep.Named++
			case covered:
				rep.Covered++
			default:
				m := Missing{Actor: id, Name: id.String(), AlarmMs: at}
				if st.named != nil {
					m.Named = c.prefix + st.named.String()
				}
				rep.Missing = append(rep.Missing, m)
			}
		}
		for _, e := range mine {
			if explained[e.Object] {
				continue
			}
			explained[e.Object] = true
			x := Extra{Entry: e}
			switch {
			case st.deleted:
				x.Reason = ReasonDeleted
			case st.alarm == nil:
				x.Reason, x.Detail = ReasonStale, "no alarm is committed"
			case e.DueMs != *st.alarm:
				x.Reason, x.Detail = ReasonStale, fmt.Sprintf("the committed alarm is at %d", *st.alarm)
			case st.named != nil && st.named.DueMs == e.DueMs && !st.named.Legacy && (e.Legacy || e.Generation < st.named.Tag.Generation):
				x.Reason, x.Detail = ReasonOlderGeneration, fmt.Sprintf("the named entry is of generation %d", st.named.Tag.Generation)
			default:
				x.Reason = ReasonUnnamed
			}
			rep.Extra = append(rep.Extra, c.unserved(x, opts))
		}
	}

	sortExtra(rep.Extra)
	if rep.Nested, err = c.nested(ctx, rep.Missing); err != nil {
		return rep, err
	}
	rep.Requests = sub(c.b.Counts(), before)
	return rep, nil
}

// readStates reads the newest state of each actor of ids, opts.Concurrency
// at a time, in ids' order; the first error stops the rest.
func (c *Cluster) readStates(ctx context.Context, ids []abi.ActorID, opts VerifyOptions) ([]state, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := opts.Concurrency
	if workers <= 0 {
		workers = DefaultVerifyConcurrency
	}
	out := make([]state, len(ids))
	next := make(chan int)
	var (
		mu       sync.Mutex
		firstErr error
		done     int
		wg       sync.WaitGroup
	)
	for range min(workers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				st, err := c.readLatest(ctx, ids[i])
				mu.Lock()
				out[i] = st
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				done++
				if opts.Progress != nil && err == nil && (done%100 == 0 || done == len(ids)) {
					opts.Progress(done, len(ids))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := range ids {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return out, firstErr
}

// readLatest reads an actor's newest state, which its ownership record
// names (cluster.ReadState: a GET of the record and at most a HEAD),
// reading the record again when a live cluster replaced that snapshot
// (and removed it) meanwhile. A state with absent set: the records name
// none.
func (c *Cluster) readLatest(ctx context.Context, id abi.ActorID) (state, error) {
	for try := 0; ; try++ {
		snap, ok, err := cluster.ReadState(ctx, c.b, c.prefix, id)
		if err != nil {
			return state{}, err
		}
		if !ok {
			return state{absent: true}, nil
		}
		st, err := c.readState(ctx, id, snap)
		if errors.Is(err, bucket.ErrNotFound) && try < 5 {
			continue
		}
		return st, err
	}
}

// nested finds the keys under the cluster's prefix that are both an object
// and the folder of other keys. A store that lists both (S3, the memory
// bucket) shows them in one listing of the prefix. MinIO hides the keys
// under such an object even from a listing of the object's own folder, so
// there the doctor finds only those it knows must exist: the entry each
// missing alarm's state names, when one of its folders is an object and a
// GET finds the entry.
func (c *Cluster) nested(ctx context.Context, missing []Missing) ([]Nested, error) {
	keys, err := c.b.List(ctx, c.prefix, "", math.MaxInt32)
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's keys: %w", err)
	}
	// Keys list in byte order: the first key at or after a folder is under
	// it if any is.
	has := func(k string) bool {
		i := sort.SearchStrings(keys, k)
		return i < len(keys) && keys[i] == k
	}
	out := []Nested{}
	for _, k := range keys {
		folder := k + "/"
		if i := sort.SearchStrings(keys, folder); i < len(keys) && strings.HasPrefix(keys[i], folder) {
			out = append(out, Nested{Object: k, Under: keys[i]})
		}
	}
	for _, m := range missing {
		for i := len(c.prefix); i < len(m.Named); i++ {
			if m.Named[i] != '/' || !has(m.Named[:i]) {
				continue
			}
			_, _, err := c.b.Get(ctx, m.Named)
			if errors.Is(err, bucket.ErrNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			out = append(out, Nested{Object: m.Named[:i], Under: m.Named, Hidden: true})
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Object < out[j].Object })
	return out, nil
}

func (c *Cluster) unserved(x Extra, opts VerifyOptions) Extra {
	if opts.Serves != nil && !opts.Serves(x.Actor.Class) {
		if x.Detail != "" {
			x.Detail = x.Reason + ": " + x.Detail
		} else {
			x.Detail = x.Reason
		}
		x.Reason = ReasonUnservedClass
	}
	return x
}

func sortExtra(xs []Extra) {
	for i := 1; i < len(xs); i++ { // insertion sort: reports are small
		for j := i; j > 0 && xs[j].Object < xs[j-1].Object; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

func sub(a, b bucket.Counts) bucket.Counts {
	return bucket.Counts{Get: a.Get - b.Get, Head: a.Head - b.Head, Put: a.Put - b.Put, Delete: a.Delete - b.Delete, List: a.List - b.List, ListPages: a.ListPages - b.ListPages,
		DeleteBatch: a.DeleteBatch - b.DeleteBatch, BatchKeys: a.BatchKeys - b.BatchKeys}
}

// BackfillReport is what Backfill did.
type BackfillReport struct {
	// Actors read, Alarms among them.
	Actors, Alarms int
	// Put are the entries listed (object keys).
	Put []string
	// Requests sent, the PUTs included.
	Requests bucket.Counts
}

// Backfill lists an entry for every committed alarm that has none at its
// time (the spec's "alarms set before this change", or an entry removed by
// hand), as the rules' [alarmindex.Rules.Backfill] plans it: the named
// entry again under its own key, or a fresh one tagged with the state's
// generation. It never deletes, and a PUT it sends at worst leaves an extra
// entry, so it is safe while the cluster runs.
func (c *Cluster) Backfill(ctx context.Context, nonces alarmindex.Nonces) (BackfillReport, error) {
	before := c.b.Counts()
	s, err := c.scan(ctx)
	if err != nil {
		return BackfillReport{}, err
	}
	rules := alarmindex.Rules{Nonces: nonces}
	rep := BackfillReport{Actors: len(s.states), Put: []string{}}
	for _, id := range sortedActors(s.states) {
		st, err := c.readState(ctx, id, s.states[id])
		if err != nil {
			return rep, err
		}
		if st.alarm == nil {
			continue
		}
		rep.Alarms++
		f := alarmindex.BackfillFacts{Actor: id, Alarm: st.alarm, Recorded: st.named, Generation: st.generation}
		for _, e := range s.entries[id] {
			f.AtAlarm = append(f.AtAlarm, e.key())
		}
		k, err := rules.Backfill(f)
		if err != nil {
			return rep, err
		}
		if k == nil {
			continue
		}
		if _, err := c.index.Put(ctx, k.String(), nil, bucket.Cond{IfNoneMatch: true}); err != nil && !isPrecondition(err) {
			return rep, fmt.Errorf("actor %s: listing its alarm: %w", id, err)
		}
		rep.Put = append(rep.Put, c.prefix+k.String())
	}
	rep.Requests = sub(c.b.Counts(), before)
	return rep, nil
}
