package bucket

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Op describes one request to a Mem bucket, as passed to Mem.Faults and
// Mem.OnChange.
type Op struct {
	// Seq numbers the requests Mem received, from 1, in arrival order
	// (deterministic when requests come from one goroutine).
	Seq uint64
	// Kind is the operation.
	Kind OpKind
	// Key is the object key (Get, Put, Delete). For OnChange of a
	// DeleteBatch, the key that batch removed.
	Key string
	// Keys are the keys of a DeleteBatch request (at most MaxDeleteBatch).
	// Treat them as read-only.
	Keys []string
	// Body is the PUT body. Treat it as read-only.
	Body []byte
	// Cond is the PUT condition.
	Cond Cond
	// Prefix, StartAfter and Limit are the List arguments.
	Prefix, StartAfter string
	Limit              int
	// Delimiter is "/" for a ListFolders page (StartAfter is then the
	// first key the page may hold), "" for a List.
	Delimiter string
	// Late is set when OnChange reports an operation held by a Late fault and
	// applied later by ApplyLate or ApplyLateOne.
	Late bool
}

// Fault is what Mem.Faults decides for one request. The zero value lets the
// request through.
type Fault struct {
	// Delay is slept (through Mem.Sleep) before anything else happens; if the
	// caller's context ends meanwhile, the request fails and is not applied.
	Delay time.Duration
	// Err fails the request with this cause without applying it.
	Err error
	// Late fails the request to its caller with a timeout (an error wrapping
	// context.DeadlineExceeded) but, for a PUT, DELETE or DELETE-BATCH, holds the
	// operation: ApplyLate or ApplyLateOne applies it later, modelling a
	// request that lands after its caller gave up. Its condition is checked
	// when it is applied. A late GET or LIST only fails. Err wins over Late.
	Late bool
	// Omit, for a LIST page (List, ListInfo), leaves out of the answer
	// every key for which it returns true, though the key exists: what an
	// erasure-coded store's listing does now and then to a key that is
	// being overwritten (MinIO reads a listing from a subset of its
	// drives). The keys after it are listed as usual.
	Omit func(key string) bool
}

type memObject struct {
	body []byte
	etag string
}

// Mem is an in-memory Bucket with the same semantics as S3 (see the package
// documentation), safe for concurrent use, with deterministic fault injection
// for unit tests and a single-threaded simulator. Set the hook fields before
// first use and do not change them afterwards. The zero value is an empty
// bucket with no faults.
//
// ETags are quoted like S3's. A non-empty object's ETag is its MD5 plus a
// version number unique within this Mem, so If-Match tells apart two writes
// of the same body; an empty object's ETag is the MD5 of nothing, as on S3.
type Mem struct {
	// Faults, if set, is called once per request (outside Mem's locks) and
	// decides its fate.
	Faults func(op Op) Fault
	// Sleep performs a Fault's Delay. If nil, Mem sleeps in real time and
	// stops early when ctx ends. A simulator sets it to advance its own clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnChange, if set, is called after every applied mutation (a PUT that
	// stored an object, a DELETE that removed one, and for a DELETE-BATCH
	// once per key it removed, in the batch's order, with Key set to it),
	// including late ones, in the order they were applied. It may read the bucket (Keys, Object,
	// Get, List) but must not mutate it.
	OnChange func(op Op)

	change sync.Mutex // serialises mutations with their OnChange calls
	mu     sync.Mutex // guards everything below
	objs   map[string]memObject
	keys   []string // sorted keys of objs
	ver    uint64
	seq    uint64
	late   []Op
	pages  atomic.Int64
}

// NewMem returns an empty in-memory bucket with no faults.
func NewMem() *Mem { return &Mem{} }

// emptyETag is S3's ETag for every empty object: the MD5 of nothing.
const emptyETag = `"d41d8cd98f00b204e9800998ecf8427e"`

func (m *Mem) nextOp(op Op) Op {
	m.mu.Lock()
	m.seq++
	op.Seq = m.seq
	m.mu.Unlock()
	return op
}

func (m *Mem) fail(op Op, err error) error {
	key := op.Key
	if op.Kind == OpList {
		key = op.Prefix
	}
	return &OpError{Bucket: "mem", Op: op.Kind, Key: key, Attempts: 1, Err: err}
}

// Sleep waits d, or until ctx ends (then it returns ctx's error): what Mem
// does for a Fault's Delay without a Sleep hook, and how a client waits
// out a retry's backoff.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// admit runs the fault hook for op. It returns held=true if the operation was
// held as late, and a non-nil error if the request fails to its caller.
func (m *Mem) admit(ctx context.Context, op Op) (held bool, err error) {
	_, held, err = m.admitFault(ctx, op)
	return held, err
}

// admitFault is admit that also returns the fault drawn (a LIST page
// applies its Omit).
func (m *Mem) admitFault(ctx context.Context, op Op) (f Fault, held bool, err error) {
	if m.Faults != nil {
		f = m.Faults(op)
	}
	held, err = m.applyFault(ctx, op, f)
	return f, held, err
}

func (m *Mem) applyFault(ctx context.Context, op Op, f Fault) (held bool, err error) {
	if f.Delay > 0 {
		sleep := m.Sleep
		if sleep == nil {
			sleep = Sleep
		}
		if err := sleep(ctx, f.Delay); err != nil {
			return false, m.fail(op, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return false, m.fail(op, err)
	}
	if f.Err != nil {
		return false, m.fail(op, f.Err)
	}
	if f.Late {
		if op.Kind == OpPut || op.Kind == OpDelete || op.Kind == OpDeleteBatch {
			m.mu.Lock()
			m.late = append(m.late, op)
			m.mu.Unlock()
			held = true
		}
		return held, m.fail(op, fmt.Errorf("request timed out; it may still land: %w", context.DeadlineExceeded))
	}
	return false, nil
}

// Get returns the object stored under key.
func (m *Mem) Get(ctx context.Context, key string) ([]byte, string, error) {
	op := m.nextOp(Op{Kind: OpGet, Key: key})
	if _, err := m.admit(ctx, op); err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	m.mu.Unlock()
	if !ok {
		return nil, "", m.fail(op, ErrNotFound)
	}
	return append([]byte{}, o.body...), o.etag, nil
}

// Head returns the ETag of the object stored under key (one request,
// which meets the fault hook as OpHead).
func (m *Mem) Head(ctx context.Context, key string) (string, error) {
	op := m.nextOp(Op{Kind: OpHead, Key: key})
	if _, err := m.admit(ctx, op); err != nil {
		return "", err
	}
	m.mu.Lock()
	o, ok := m.objs[key]
	m.mu.Unlock()
	if !ok {
		return "", m.fail(op, ErrNotFound)
	}
	return o.etag, nil
}

// Put stores body under key if cond holds.
func (m *Mem) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	op := m.nextOp(Op{Kind: OpPut, Key: key, Body: slices.Clone(body), Cond: cond})
	if err := cond.Validate(); err != nil {
		return "", m.fail(op, err)
	}
	if _, err := m.admit(ctx, op); err != nil {
		return "", err
	}
	etag, err := m.apply(op)
	if err != nil {
		return "", m.fail(op, err)
	}
	return etag, nil
}

// Delete removes key; a missing key is not an error.
func (m *Mem) Delete(ctx context.Context, key string) error {
	op := m.nextOp(Op{Kind: OpDelete, Key: key})
	if _, err := m.admit(ctx, op); err != nil {
		return err
	}
	_, err := m.apply(op)
	return err
}

// DeleteBatch removes keys, MaxDeleteBatch per request; each request meets
// the fault hook once, as one Op with Keys, and is applied key by key in
// its order (S3's multi-object delete is not atomic either).
func (m *Mem) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	var deleted []string
	for len(keys) > 0 {
		n := min(len(keys), MaxDeleteBatch)
		chunk := slices.Clone(keys[:n])
		keys = keys[n:]
		op := m.nextOp(Op{Kind: OpDeleteBatch, Key: chunk[0], Keys: chunk})
		if _, err := m.admit(ctx, op); err != nil {
			return deleted, err
		}
		_, _ = m.apply(op)
		deleted = append(deleted, chunk...)
	}
	return deleted, nil
}

// apply performs a PUT, DELETE or DELETE-BATCH and reports it to OnChange if it changed
// the bucket. The error is the bare cause (a failed condition).
func (m *Mem) apply(op Op) (string, error) {
	m.change.Lock()
	defer m.change.Unlock()
	if op.Kind == OpDeleteBatch {
		for _, k := range op.Keys {
			m.mu.Lock()
			_, exists := m.objs[k]
			if exists {
				delete(m.objs, k)
				i, _ := slices.BinarySearch(m.keys, k)
				m.keys = slices.Delete(m.keys, i, i+1)
			}
			m.mu.Unlock()
			if exists && m.OnChange != nil {
				one := op
				one.Key = k
				m.OnChange(one)
			}
		}
		return "", nil
	}
	m.mu.Lock()
	if m.objs == nil {
		m.objs = map[string]memObject{}
	}
	cur, exists := m.objs[op.Key]
	var etag string
	changed := false
	switch op.Kind {
	case OpPut:
		switch {
		case op.Cond.IfNoneMatch && exists:
			m.mu.Unlock()
			return "", fmt.Errorf("%w: the key exists (If-None-Match: *)", ErrPrecondition)
		case op.Cond.IfMatch != "" && !exists:
			m.mu.Unlock()
			return "", fmt.Errorf("%w: If-Match on a missing key: %w", ErrPrecondition, ErrNotFound)
		case op.Cond.IfMatch != "" && unquote(op.Cond.IfMatch) != unquote(cur.etag):
			m.mu.Unlock()
			return "", fmt.Errorf("%w: ETag is %s, not %s (If-Match)", ErrPrecondition, cur.etag, op.Cond.IfMatch)
		}
		m.ver++
		etag = emptyETag
		if len(op.Body) > 0 {
			sum := md5.Sum(op.Body)
			etag = `"` + hex.EncodeToString(sum[:]) + "-" + strconv.FormatUint(m.ver, 10) + `"`
		}
		if !exists {
			i, _ := slices.BinarySearch(m.keys, op.Key)
			m.keys = slices.Insert(m.keys, i, op.Key)
		}
		m.objs[op.Key] = memObject{body: slices.Clone(op.Body), etag: etag}
		changed = true
	case OpDelete:
		if exists {
			delete(m.objs, op.Key)
			i, _ := slices.BinarySearch(m.keys, op.Key)
			m.keys = slices.Delete(m.keys, i, i+1)
			changed = true
		}
	}
	m.mu.Unlock()
	if changed && m.OnChange != nil {
		m.OnChange(op)
	}
	return etag, nil
}

func unquote(etag string) string {
	if len(etag) >= 2 && etag[0] == '"' && etag[len(etag)-1] == '"' {
		return etag[1 : len(etag)-1]
	}
	return etag
}

// List returns up to limit keys under prefix after startAfter, in key order.
// It reads pages of at most MaxPage keys, as S3 does, and counts them (see
// ListPagesSent).
func (m *Mem) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, _, err := m.ListPaged(ctx, prefix, startAfter, limit)
	return keys, err
}

// ListPaged is List that also returns how many LIST requests (pages) it
// sent; see PagedLister.
func (m *Mem) ListPaged(ctx context.Context, prefix, startAfter string, limit int) ([]string, int, error) {
	return listPages(m, ctx, prefix, startAfter, limit, m.page, func(k string) string { return k })
}

// listPages lists up to limit items under prefix after startAfter a page
// at a time: each page is one request and meets the fault hook, like S3's,
// and page reads up to n items after a key, under one lock (as one request
// sees the store), and says whether more follow. It returns the items and
// how many pages it sent.
func listPages[T any](m *Mem, ctx context.Context, prefix, startAfter string, limit int,
	page func(prefix, after string, n int) ([]T, bool), key func(T) string) ([]T, int, error) {
	op := m.nextOp(Op{Kind: OpList, Prefix: prefix, StartAfter: startAfter, Limit: limit})
	if err := CheckLimit(limit); err != nil {
		return nil, 0, m.fail(op, err)
	}
	var out []T
	pages := 0
	after := startAfter
	for {
		pageOp := op
		if pages > 0 {
			pageOp = m.nextOp(Op{Kind: OpList, Prefix: prefix, StartAfter: after, Limit: limit - len(out)})
		}
		pages++
		m.pages.Add(1)
		f, _, err := m.admitFault(ctx, pageOp)
		if err != nil {
			return nil, pages, err
		}
		items, truncated := page(prefix, after, min(MaxPage, limit-len(out)))
		if len(items) > 0 {
			after = key(items[len(items)-1])
		}
		n := len(items)
		if f.Omit != nil {
			items = slices.DeleteFunc(items, func(it T) bool { return f.Omit(key(it)) })
		}
		out = append(out, items...)
		if !truncated || len(out) >= limit || n == 0 {
			return out, pages, nil
		}
	}
}

// page returns up to n keys under prefix after startAfter, and whether more
// follow.
func (m *Mem) page(prefix, startAfter string, n int) ([]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := max(startAfter, prefix)
	i := sort.SearchStrings(m.keys, from)
	if i < len(m.keys) && m.keys[i] == startAfter {
		i++
	}
	var page []string
	for ; i < len(m.keys); i++ {
		k := m.keys[i]
		if len(k) < len(prefix) || k[:len(prefix)] != prefix {
			return page, false
		}
		if len(page) == n {
			return page, true
		}
		page = append(page, k)
	}
	return page, false
}

// ListPagesSent returns how many LIST pages (requests) this bucket has
// served since it was created, failed ones included.
func (m *Mem) ListPagesSent() int64 { return m.pages.Load() }

// Late returns the operations held by Late faults and not yet applied or
// dropped, oldest first. Index i is the one ApplyLateOne(i) applies.
func (m *Mem) Late() []Op {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.late)
}

// ApplyLate applies every held operation, oldest first, as if each request
// landed now (conditions are checked now), and returns how many it applied.
func (m *Mem) ApplyLate() int {
	m.mu.Lock()
	held := m.late
	m.late = nil
	m.mu.Unlock()
	for _, op := range held {
		op.Late = true
		_, _ = m.apply(op) // the caller gave up long ago: nobody sees the outcome
	}
	return len(held)
}

// ApplyLateOne applies the held operation at index i of Late() and removes it
// from the held list. It returns the outcome the store reached (nil, or an
// error wrapping ErrPrecondition), which no caller would have seen, or an
// error if there is no such operation.
func (m *Mem) ApplyLateOne(i int) error {
	m.mu.Lock()
	if i < 0 || i >= len(m.late) {
		n := len(m.late)
		m.mu.Unlock()
		return fmt.Errorf("bucket \"mem\": no late operation %d (%d held)", i, n)
	}
	op := m.late[i]
	m.late = slices.Delete(m.late, i, i+1)
	m.mu.Unlock()
	op.Late = true
	if _, err := m.apply(op); err != nil {
		return m.fail(op, err)
	}
	return nil
}

// DropLate discards every held operation: those requests never land.
func (m *Mem) DropLate() {
	m.mu.Lock()
	m.late = nil
	m.mu.Unlock()
}

// Keys returns every key, in order. It bypasses the fault hook.
func (m *Mem) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.keys)
}

// Object returns the object under key, bypassing the fault hook.
func (m *Mem) Object(key string) (body []byte, etag string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return nil, "", false
	}
	return slices.Clone(o.body), o.etag, true
}
