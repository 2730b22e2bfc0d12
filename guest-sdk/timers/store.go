package timers

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
)

// StateKey is the key of the actor's key/value table under which the timers
// are kept, all in one value (so they commit with the event's other writes).
// The guest must not write it itself.
const StateKey = "wasmkeep.timers"

// formatVersion is the first byte of the stored value.
const formatVersion = 1

// state is the timers as stored, and the alarm time they last set.
type state struct {
	timers map[string]*entry
	armed  int64 // the alarm the timers last set (Unix ms); -1: none
}

type entry struct {
	name  string
	kind  Kind
	due   int64 // Unix ms
	every int64 // ms, KindEvery
	spec  string
	cron  *CronSchedule // parsed spec, KindCron
	data  []byte
}

// byDue orders entries by due time, then name: the dispatch order.
func byDue(a, b *entry) int {
	if a.due != b.due {
		if a.due < b.due {
			return -1
		}
		return 1
	}
	return strings.Compare(a.name, b.name)
}

// sorted returns the entries in dispatch order.
func (s *state) sorted() []*entry {
	out := make([]*entry, 0, len(s.timers))
	for _, e := range s.timers {
		out = append(out, e)
	}
	slices.SortFunc(out, byDue)
	return out
}

// earliest returns the entry due first, or nil.
func (s *state) earliest() *entry {
	var first *entry
	for _, e := range s.timers {
		if first == nil || byDue(e, first) < 0 {
			first = e
		}
	}
	return first
}

// load reads the stored timers; none stored is an empty state.
func load() (*state, error) {
	v, err := wasmkeep.Get(StateKey)
	if errors.Is(err, wasmkeep.ErrNotFound) {
		return &state{timers: map[string]*entry{}, armed: -1}, nil
	}
	if err != nil {
		return nil, err
	}
	s, err := decode(v)
	if err != nil {
		return nil, fmt.Errorf("timers: the value under %q: %w", StateKey, err)
	}
	return s, nil
}

// save writes the timers, or deletes the key when there are none.
func save(s *state) error {
	if len(s.timers) == 0 && s.armed < 0 {
		return wasmkeep.Delete(StateKey)
	}
	return wasmkeep.Put(StateKey, encode(s))
}

// encode writes the format: the version byte; armed+1 (0: none) as a
// uvarint; the number of timers; then, by name, each timer's name, kind
// byte, due time, and its interval (every) or cron spec (cron), and its
// data. Integers are varints, strings and data a uvarint length first.
func encode(s *state) []byte {
	b := []byte{formatVersion}
	b = binary.AppendUvarint(b, uint64(s.armed+1))
	b = binary.AppendUvarint(b, uint64(len(s.timers)))
	names := make([]string, 0, len(s.timers))
	for n := range s.timers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		e := s.timers[n]
		b = appendBytes(b, []byte(e.name))
		b = append(b, byte(e.kind))
		b = binary.AppendVarint(b, e.due)
		switch e.kind {
		case KindEvery:
			b = binary.AppendVarint(b, e.every)
		case KindCron:
			b = appendBytes(b, []byte(e.spec))
		}
		b = appendBytes(b, e.data)
	}
	return b
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

var errCorrupt = errors.New("not a timers value this SDK can read")

func decode(b []byte) (*state, error) {
	if len(b) == 0 || b[0] != formatVersion {
		return nil, errCorrupt
	}
	r := reader{b: b[1:]}
	s := &state{armed: int64(r.uvarint()) - 1}
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		return nil, errCorrupt
	}
	s.timers = make(map[string]*entry, n)
	for range n {
		e := &entry{name: string(r.bytes())}
		e.kind = Kind(r.byte())
		e.due = r.varint()
		switch e.kind {
		case KindAt:
		case KindEvery:
			e.every = r.varint()
			if e.every <= 0 {
				r.err = errCorrupt
			}
		case KindCron:
			e.spec = string(r.bytes())
			if r.err == nil {
				c, err := parseCached(e.spec)
				if err != nil {
					return nil, err
				}
				e.cron = c
			}
		default:
			r.err = errCorrupt
		}
		if d := r.bytes(); len(d) > 0 {
			e.data = d
		}
		if r.err != nil {
			return nil, r.err
		}
		s.timers[e.name] = e
	}
	if len(r.b) != 0 {
		return nil, errCorrupt
	}
	return s, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err, r.b = errCorrupt, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err, r.b = errCorrupt, nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.err, r.b = errCorrupt, nil
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// cronCache keeps parsed specs across events (an instance serves many).
var cronCache = map[string]*CronSchedule{}

func parseCached(spec string) (*CronSchedule, error) {
	if c, ok := cronCache[spec]; ok {
		return c, nil
	}
	c, err := ParseCron(spec)
	if err != nil {
		return nil, err
	}
	if len(cronCache) > 1024 {
		clear(cronCache)
	}
	cronCache[spec] = c
	return c, nil
}
