package alarmindex

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/format"
)

// Key layout constants.
const (
	// Root is the prefix of every index entry.
	Root = "alarms/"
	// TaggedClassSuffix ends the class segment of a tagged entry: tagged
	// entries sit in a sibling folder of the legacy ones, so no key is both
	// an object and the folder of others. It also marks the entry's format
	// version, 1 (format.IndexVersion): legacy entries are read by version
	// 1 too.
	TaggedClassSuffix = ".t"
	// VersionClassSuffix, followed by a version N in decimal, ends the
	// class segment of an entry of format version N above 1:
	// alarms/<tenant>/<due>/<class>.v<N>/..., whatever follows. Every
	// version keeps the tenant and the due time where they are, so a
	// listing stays in due order and a sweep stops at the first entry not
	// yet due. Class names have no '.', so no class folder of version 1
	// looks like one.
	VersionClassSuffix = ".v"
	// MaxDueMs is the latest due time a key can hold: 15 decimal digits.
	MaxDueMs = abi.MaxAlarmMillis
	// MaxKeyLen is the longest object key S3 accepts, in bytes. A key longer
	// than this (a very long actor name) cannot be indexed.
	MaxKeyLen = 1024

	dueDigits = 15
	genDigits = 20
)

// Meta keys in the actor's database that the rules speak about.
const (
	// MetaAlarmIndexed holds the entry that stands for the committed alarm,
	// as [FormatRecorded] writes it.
	MetaAlarmIndexed = "alarm_indexed"
	// MetaOwnerFence is the one-line change an owner uploads before it
	// removes entries as stale (DeliveryPlan.Fence).
	MetaOwnerFence = "owner_fence"
)

// Tag is the last segment of a tagged entry: the generation of the hold that
// wrote it and a nonce that process never used before.
type Tag struct {
	Generation uint64
	// Nonce is non-empty lowercase hex.
	Nonce string
}

// String gives "<generation, 20 digits>-<nonce>".
func (t Tag) String() string {
	var b strings.Builder
	b.Grow(genDigits + 1 + len(t.Nonce))
	t.write(&b)
	return b.String()
}

func (t Tag) write(b *strings.Builder) {
	writePadded(b, t.Generation, genDigits)
	b.WriteByte('-')
	b.WriteString(t.Nonce)
}

// writePadded writes v in decimal, zero-padded to width digits.
func writePadded(b *strings.Builder, v uint64, width int) {
	var d [20]byte
	s := strconv.AppendUint(d[:0], v, 10)
	for range width - len(s) {
		b.WriteByte('0')
	}
	b.Write(s)
}

// Key is one index entry. Legacy entries (written before tags existed) have
// a zero Tag. Keys are comparable with ==.
type Key struct {
	Actor abi.ActorID
	// DueMs is the due time in Unix milliseconds, 0..MaxDueMs.
	DueMs int64
	// Legacy marks the untagged form alarms/<tenant>/<at>/<class>/<name hex>.
	Legacy bool
	// Tag is set for tagged entries, zero for legacy ones.
	Tag Tag
}

// String gives the object key. It does not validate; see [Key.Validate].
func (k Key) String() string {
	if k.Legacy {
		return LegacyKey(k.Actor, k.DueMs)
	}
	if k.DueMs < 0 {
		return TaggedPrefix(k.Actor, k.DueMs) + k.Tag.String()
	}
	// One allocation: a firing writes a key and records it (the same
	// string as TaggedPrefix and Tag.String would give, joined).
	a := k.Actor
	var b strings.Builder
	b.Grow(len(Root) + len(a.Tenant) + 1 + dueDigits + 1 + len(a.Class) + len(TaggedClassSuffix) + 1 + 2*len(a.Name) + 1 + genDigits + 1 + len(k.Tag.Nonce))
	b.WriteString(Root)
	b.WriteString(a.Tenant)
	b.WriteByte('/')
	writePadded(&b, uint64(k.DueMs), dueDigits)
	b.WriteByte('/')
	b.WriteString(a.Class)
	b.WriteString(TaggedClassSuffix)
	b.WriteByte('/')
	const hexDigits = "0123456789abcdef"
	for i := range len(a.Name) {
		b.WriteByte(hexDigits[a.Name[i]>>4])
		b.WriteByte(hexDigits[a.Name[i]&0xf])
	}
	b.WriteByte('/')
	k.Tag.write(&b)
	return b.String()
}

// Validate reports whether the key is one [ParseKey] accepts: a valid actor,
// a due time in range, a tag with a non-empty lowercase hex nonce (or a
// zero tag for a legacy key), and at most MaxKeyLen bytes in all.
func (k Key) Validate() error {
	if err := k.Actor.Validate(); err != nil {
		return err
	}
	if k.DueMs < 0 || k.DueMs > MaxDueMs {
		return &abi.ActorError{ID: k.Actor, Op: "alarm index", Err: fmt.Errorf("due time %d outside 0..%d", k.DueMs, int64(MaxDueMs))}
	}
	if k.Legacy {
		if k.Tag != (Tag{}) {
			return &abi.ActorError{ID: k.Actor, Op: "alarm index", Err: errors.New("a legacy key has no tag")}
		}
	} else if !isLowerHex(k.Tag.Nonce) {
		return &abi.ActorError{ID: k.Actor, Op: "alarm index", Err: fmt.Errorf("nonce %q is not non-empty lowercase hex", k.Tag.Nonce)}
	}
	if n := len(k.String()); n > MaxKeyLen {
		return &abi.ActorError{ID: k.Actor, Op: "alarm index", Err: fmt.Errorf("key is %d bytes, longer than %d (name too long)", n, MaxKeyLen)}
	}
	return nil
}

// TenantPrefix is "alarms/<tenant>/": every entry of the tenant.
func TenantPrefix(tenant string) string {
	return Root + tenant + "/"
}

// TimePrefix is "alarms/<tenant>/<due>/": every entry of the tenant due at
// dueMs (which should be in 0..MaxDueMs).
func TimePrefix(tenant string, dueMs int64) string {
	return TenantPrefix(tenant) + formatDue(dueMs) + "/"
}

// TaggedPrefix is the folder of the actor's tagged entries due at dueMs:
// listing it is the one LIST a stale cleanup costs.
func TaggedPrefix(a abi.ActorID, dueMs int64) string {
	return TimePrefix(a.Tenant, dueMs) + a.Class + TaggedClassSuffix + "/" + a.NameHex() + "/"
}

// LegacyKey is the untagged entry of the actor at dueMs.
func LegacyKey(a abi.ActorID, dueMs int64) string {
	return TimePrefix(a.Tenant, dueMs) + a.Class + "/" + a.NameHex()
}

func formatDue(ms int64) string {
	if ms < 0 { // never valid; written as fmt would
		return fmt.Sprintf("%0*d", dueDigits, ms)
	}
	var b strings.Builder
	b.Grow(dueDigits)
	writePadded(&b, uint64(ms), dueDigits)
	return b.String()
}

// ParseKey parses an object key of either form. It accepts exactly what
// [Key.String] writes for a valid key, so ParseKey(s) succeeding means
// k.String() == s.
//
// A key of a later format (its class folder <class>.v<N>, N above
// format.IndexVersion) is refused with an error wrapping a
// *format.NewerError: nothing after its due time is read. The Key returned
// with that error holds only the tenant and the due time, which every
// format keeps in place, so that a sweep can tell whether the entry is due
// and skip it (never deliver or delete it).
func ParseKey(s string) (Key, error) {
	if len(s) > MaxKeyLen {
		return Key{}, keyErr(s, fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	}
	rest, ok := strings.CutPrefix(s, Root)
	if !ok {
		return Key{}, keyErr(s, "does not start with "+Root)
	}
	parts := strings.Split(rest, "/")
	if len(parts) >= 3 {
		if k, versioned, err := parseVersioned(s, parts); versioned {
			return k, err
		}
	}
	var k Key
	var classSeg, nameSeg string
	switch len(parts) {
	case 4:
		k.Legacy = true
		classSeg, nameSeg = parts[2], parts[3]
	case 5:
		var cut bool
		classSeg, cut = strings.CutSuffix(parts[2], TaggedClassSuffix)
		if !cut {
			return Key{}, keyErr(s, "tagged class folder does not end in "+TaggedClassSuffix)
		}
		nameSeg = parts[3]
		tag, err := parseTag(parts[4])
		if err != nil {
			return Key{}, keyErr(s, err.Error())
		}
		k.Tag = tag
	default:
		return Key{}, keyErr(s, "wrong number of segments")
	}
	due, err := parseDue(parts[1])
	if err != nil {
		return Key{}, keyErr(s, err.Error())
	}
	k.DueMs = due
	name, err := abi.DecodeNameHex(nameSeg)
	if err != nil {
		return Key{}, keyErr(s, err.Error())
	}
	k.Actor = abi.ActorID{Tenant: parts[0], Class: classSeg, Name: string(name)}
	if err := k.Actor.Validate(); err != nil {
		return Key{}, keyErr(s, err.Error())
	}
	return k, nil
}

// parseVersioned reads a key whose class folder names a format version
// (<class>.v<N>): versioned is false for every other key. A version this
// build reads is none yet (version 1 is <class>.t): a version of 1 or
// below, or one written otherwise than in plain decimal, is malformed.
func parseVersioned(s string, parts []string) (k Key, versioned bool, err error) {
	seg := parts[2]
	i := strings.LastIndex(seg, VersionClassSuffix)
	if i < 0 {
		return Key{}, false, nil
	}
	class, digits := seg[:i], seg[i+len(VersionClassSuffix):]
	if abi.ValidateClass(class) != nil || digits == "" || !isDigits(digits) || digits[0] == '0' || len(digits) > 9 {
		return Key{}, false, nil // not a version folder: malformed as any other key
	}
	v, _ := strconv.ParseInt(digits, 10, 64)
	ferr := format.Check(format.IndexEntry, v)
	if ferr == nil {
		return Key{}, true, keyErr(s, fmt.Sprintf("format version %d is written %s, not %s%d", v, TaggedClassSuffix, VersionClassSuffix, v))
	}
	if abi.ValidateTenant(parts[0]) != nil {
		return Key{}, true, keyErr(s, "the tenant is not valid")
	}
	due, derr := parseDue(parts[1])
	if derr != nil {
		return Key{}, true, keyErr(s, derr.Error())
	}
	return Key{Actor: abi.ActorID{Tenant: parts[0]}, DueMs: due}, true, fmt.Errorf("alarm index: key %q: %w", s, ferr)
}

func keyErr(s, cause string) error {
	return fmt.Errorf("alarm index: key %q: %s", s, cause)
}

func parseDue(s string) (int64, error) {
	if len(s) != dueDigits || !isDigits(s) {
		return 0, errors.New("due time is not 15 digits")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("due time is not 15 digits")
	}
	return v, nil
}

func parseTag(s string) (Tag, error) {
	genStr, nonce, ok := strings.Cut(s, "-")
	if !ok {
		return Tag{}, errors.New("tag has no '-'")
	}
	if len(genStr) != genDigits || !isDigits(genStr) {
		return Tag{}, errors.New("generation is not 20 digits")
	}
	gen, err := strconv.ParseUint(genStr, 10, 64)
	if err != nil {
		return Tag{}, errors.New("generation overflows 64 bits")
	}
	if !isLowerHex(nonce) {
		return Tag{}, errors.New("nonce is not non-empty lowercase hex")
	}
	return Tag{Generation: gen, Nonce: nonce}, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isLowerHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// FormatRecorded gives the alarm_indexed meta value naming k: "" for none,
// "<due>" (15 digits) for a legacy entry, "<due>/<tag>" for a tagged one.
func FormatRecorded(k *Key) string {
	if k == nil {
		return ""
	}
	if k.Legacy {
		return formatDue(k.DueMs)
	}
	return formatDue(k.DueMs) + "/" + k.Tag.String()
}

// ParseRecorded parses an alarm_indexed meta value of actor a: nil for "".
// An error means the recorded entry cannot be read: the caller gives the
// actor up rather than guess which entry stands for its alarm.
func ParseRecorded(a abi.ActorID, s string) (*Key, error) {
	if s == "" {
		return nil, nil
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	dueStr, tagStr, tagged := strings.Cut(s, "/")
	due, err := parseDue(dueStr)
	if err != nil {
		return nil, &abi.ActorError{ID: a, Op: "alarm index", Err: fmt.Errorf("recorded entry %q: %v", s, err)}
	}
	k := &Key{Actor: a, DueMs: due, Legacy: !tagged}
	if tagged {
		tag, err := parseTag(tagStr)
		if err != nil {
			return nil, &abi.ActorError{ID: a, Op: "alarm index", Err: fmt.Errorf("recorded entry %q: %v", s, err)}
		}
		k.Tag = tag
	}
	return k, nil
}
