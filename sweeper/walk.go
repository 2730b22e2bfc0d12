package sweeper

import (
	"strings"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/format"
)

// Defaults of a walk.
const (
	// DefaultMaxEntries is how many index keys one sweep reads at most.
	DefaultMaxEntries = 2048
	// DefaultPageSize is the most keys one LIST asks for (S3 returns at most
	// 1,000 a page).
	DefaultPageSize = 1000
)

// WalkLimits bound one walk. Zero fields take the defaults.
type WalkLimits struct {
	// MaxEntries is how many keys the walk reads at most (overdue entries
	// and malformed keys; the entry that ends the walk is not counted).
	MaxEntries int
	// PageSize is the largest limit one LIST is asked for.
	PageSize int
}

func (l WalkLimits) withDefaults() WalkLimits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.PageSize <= 0 {
		l.PageSize = DefaultPageSize
	}
	return l
}

// Entry is an overdue index entry the walk met: its object key in the bucket
// and what that key says.
type Entry struct {
	// Object is the entry's key in the bucket.
	Object string
	// Key is Object parsed.
	Key alarmindex.Key
}

// NewerEntry is an index entry of a format newer than this build reads.
type NewerEntry struct {
	// Object is the entry's key in the bucket; Version its format.
	Object  string
	Version int
}

// Page is one LIST the walk asks for: up to Limit keys under Prefix that sort
// after StartAfter ("" for the first key under Prefix).
type Page struct {
	Prefix     string
	StartAfter string
	Limit      int
}

// WalkResult is what a walk read.
type WalkResult struct {
	// Entries are the overdue entries, in listing (due time) order.
	Entries []Entry
	// Malformed are keys under the tenant's prefix that are not index keys
	// of that tenant; the walk skipped them.
	Malformed []string
	// Newer are the overdue entries of a format newer than this build
	// reads (alarmindex.ParseKey): the walk skipped them, to be delivered
	// by a node that reads them; nothing deletes them. An entry of a
	// newer format that is not overdue ends the walk as any other does.
	Newer []NewerEntry
	// Read counts the keys read against the limit (entries, newer and
	// malformed).
	Read int
	// Cursor is where the next walk starts: the last key read when the walk
	// stopped at its limit (or was aborted), "" when it reached the end.
	Cursor string
	// ReachedEnd says the walk met an entry not yet overdue enough or the
	// end of the listing.
	ReachedEnd bool
	// NextDueMs is the due time of the entry not yet overdue enough that
	// ended the walk (the earliest such entry, since the index is in due
	// order); 0 when the walk did not meet one (it reached the end of the
	// listing, or stopped before).
	NextDueMs int64
}

// Walk reads one tenant's index from a cursor up to a cutoff, as a state
// machine over LIST pages: the caller asks [Walk.Next] for the page to list,
// lists it, and gives the keys to [Walk.Feed], until Next reports the walk
// done. A Walk does no I/O and reads no clock.
type Walk struct {
	tenant   string
	prefix   string
	cutoffMs int64
	limits   WalkLimits

	startAfter string // the last key read; where the next page starts
	res        WalkResult
	done       bool
}

// NewWalk starts a walk of tenant's index that reads entries due at or before
// cutoffMs (now minus the lease plus grace, in Unix milliseconds), starting
// after cursor ("" or a cursor from another tenant's index: from the
// beginning).
func NewWalk(tenant, cursor string, cutoffMs int64, limits WalkLimits) *Walk {
	w := &Walk{
		tenant:   tenant,
		prefix:   alarmindex.TenantPrefix(tenant),
		cutoffMs: cutoffMs,
		limits:   limits.withDefaults(),
	}
	if strings.HasPrefix(cursor, w.prefix) {
		w.startAfter = cursor
	}
	return w
}

// Next returns the page to list next, or false when the walk is done.
func (w *Walk) Next() (Page, bool) {
	if w.done {
		return Page{}, false
	}
	limit := min(w.limits.PageSize, w.limits.MaxEntries-w.res.Read)
	return Page{Prefix: w.prefix, StartAfter: w.startAfter, Limit: limit}, true
}

// Feed takes the keys a LIST of the page from [Walk.Next] returned, in
// listing order. A page shorter than its limit is the end of the listing.
// Feeding a finished walk does nothing.
func (w *Walk) Feed(keys []string) {
	if w.done {
		return
	}
	limit := min(w.limits.PageSize, w.limits.MaxEntries-w.res.Read)
	for i, k := range keys {
		if i >= limit {
			break // a lister that returned more than asked
		}
		if k <= w.startAfter {
			// Out of order or repeated: a lister that does not honour
			// StartAfter would otherwise keep the walk going forever.
			w.finish(true)
			return
		}
		key, err := alarmindex.ParseKey(k)
		newer, isNewer := format.As(err)
		switch {
		case (err != nil && !isNewer) || key.Actor.Tenant != w.tenant:
			w.res.Malformed = append(w.res.Malformed, k)
		case key.DueMs > w.cutoffMs:
			// An entry of a newer format too: every format keeps the due
			// time in place.
			w.res.NextDueMs = key.DueMs
			w.finish(true)
			return
		case isNewer:
			// Of a newer format: its key holds only the tenant and the
			// due time (ParseKey), nothing to deliver.
			w.res.Newer = append(w.res.Newer, NewerEntry{Object: k, Version: newer.Version})
		default:
			w.res.Entries = append(w.res.Entries, Entry{Object: k, Key: key})
		}
		w.startAfter = k
		w.res.Read++
	}
	switch {
	case w.res.Read >= w.limits.MaxEntries:
		w.finish(false)
	case len(keys) < limit:
		w.finish(true)
	}
}

// Abort ends the walk early (a LIST failed): the next walk resumes after the
// last key read, as if the walk had reached its limit there.
func (w *Walk) Abort() {
	if !w.done {
		w.finish(false)
	}
}

// Done reports whether the walk is finished.
func (w *Walk) Done() bool { return w.done }

// Result returns what the walk read so far; once [Walk.Done], the cursor for
// the next walk too.
func (w *Walk) Result() WalkResult { return w.res }

func (w *Walk) finish(reachedEnd bool) {
	w.done = true
	w.res.ReachedEnd = reachedEnd
	if reachedEnd {
		w.res.Cursor = ""
		return
	}
	// The last key read; the old cursor if nothing was read yet.
	w.res.Cursor = w.startAfter
}
