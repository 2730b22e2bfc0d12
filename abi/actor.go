package abi

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of an actor's identity, in bytes. They are chosen so that every
// accepted identity fits both places it is written:
//
//   - the data directory, <tenant>/<class>/<name as hex>.db and its
//     companions (-wal, -shm, .tmp, .sync, .replaced): each path component
//     stays within the 255 bytes file systems allow (the longest, the name
//     as hex and ".db.replaced", is 212 bytes);
//   - the bucket: the longest index entry is 407 bytes, the longest
//     replicated snapshot key 376 bytes plus the cluster prefix, within
//     S3's 1,024 bytes, and no key segment is over 255 bytes (stores that
//     keep keys as files need that too).
//
// Tenants and classes are written as they are, as directory names and key
// segments, so they are held to characters every file system and object
// store keeps apart: lowercase ASCII letters, digits, '-' and '_', starting
// with a letter or a digit (no two accepted names differ only in case). A
// name may hold any bytes: it is always written as hex.
const (
	MaxTenantLen = 63
	MaxClassLen  = 63
	MaxNameLen   = 100
)

// ErrInvalidActorID is wrapped by every error about an identity that breaks
// the limits above. Such an error does not go away on retry.
var ErrInvalidActorID = errors.New("invalid actor id")

// ActorID names an actor: its tenant, its class and its name. It is the one
// identity every package uses; [ActorID.Validate] states its limits,
// [ActorID.Path] and [ParsePath] its encoding in file paths, object keys and
// the node timer.
type ActorID struct {
	Tenant string
	Class  string
	Name   string
}

// String gives "tenant/class/name" for messages. A name that is not
// printable UTF-8 is quoted as a Go string; one longer than MaxNameLen is
// cut there and its length given, so a hostile name cannot flood a log.
func (id ActorID) String() string {
	name := id.Name
	cut := len(name) > MaxNameLen
	if cut {
		name = name[:MaxNameLen]
	}
	if !printable(name) {
		name = strconv.Quote(name)
	}
	if cut {
		name += fmt.Sprintf("...(%d bytes)", len(id.Name))
	}
	return clip(id.Tenant) + "/" + clip(id.Class) + "/" + name
}

// clip shortens a tenant or class over its limit for messages.
func clip(s string) string {
	if len(s) > MaxTenantLen {
		s = s[:MaxTenantLen] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	if !printable(s) {
		return strconv.Quote(s)
	}
	return s
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Validate reports whether the identity is within the limits: a tenant and
// a class of 1 to 63 bytes of [a-z0-9_-] starting with a letter or a digit,
// a name of 1 to MaxNameLen bytes. The error is an *ActorError wrapping
// ErrInvalidActorID and says which limit is broken.
func (id ActorID) Validate() error {
	if err := checkIdent("tenant", id.Tenant, MaxTenantLen); err != nil {
		return &ActorError{ID: id, Err: err}
	}
	if err := checkIdent("class", id.Class, MaxClassLen); err != nil {
		return &ActorError{ID: id, Err: err}
	}
	switch {
	case id.Name == "":
		return &ActorError{ID: id, Err: fmt.Errorf("%w: the name is empty", ErrInvalidActorID)}
	case len(id.Name) > MaxNameLen:
		return &ActorError{ID: id, Err: fmt.Errorf("%w: the name is %d bytes, over the limit of %d bytes", ErrInvalidActorID, len(id.Name), MaxNameLen)}
	}
	return nil
}

// ValidateTenant reports whether t is a valid tenant (see [ActorID.Validate]).
func ValidateTenant(t string) error { return checkIdent("tenant", t, MaxTenantLen) }

// ValidateClass reports whether c is a valid class (see [ActorID.Validate]).
func ValidateClass(c string) error { return checkIdent("class", c, MaxClassLen) }

func checkIdent(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: the %s is empty", ErrInvalidActorID, what)
	case len(s) > max:
		return fmt.Errorf("%w: the %s is %d bytes, over the limit of %d bytes", ErrInvalidActorID, what, len(s), max)
	case !identStart(s[0]):
		return fmt.Errorf("%w: the %s %s does not start with a lowercase letter or a digit", ErrInvalidActorID, what, strconv.Quote(s))
	}
	for i := 1; i < len(s); i++ {
		if !identStart(s[i]) && s[i] != '-' && s[i] != '_' {
			return fmt.Errorf("%w: the %s %s holds %q: allowed are a-z, 0-9, '-' and '_'", ErrInvalidActorID, what, strconv.Quote(s), rune(s[i]))
		}
	}
	return nil
}

func identStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// NameHex gives the name as lowercase hex: how it appears in every path and
// key, so no store escapes or rejects its bytes.
func (id ActorID) NameHex() string {
	var buf [2 * MaxNameLen]byte
	return string(hex.AppendEncode(buf[:0], []byte(id.Name)))
}

// Path gives "tenant/class/<name as hex>": the actor's place in the data
// directory (with ".db"), in the bucket's state and hold folders, and its
// key in the node timer. Two different identities never share a path.
func (id ActorID) Path() string {
	// One allocation: the node timer's key is made for every firing.
	var buf [MaxTenantLen + MaxClassLen + 2*MaxNameLen + 2]byte
	b := append(buf[:0], id.Tenant...)
	b = append(b, '/')
	b = append(b, id.Class...)
	b = append(b, '/')
	b = hex.AppendEncode(b, []byte(id.Name))
	return string(b)
}

// ParsePath reads what [ActorID.Path] writes, and accepts only a valid
// identity.
func ParsePath(p string) (ActorID, error) {
	tenant, rest, ok1 := strings.Cut(p, "/")
	class, nameHex, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || strings.Contains(nameHex, "/") {
		return ActorID{}, fmt.Errorf("%w: path %q is not tenant/class/name-as-hex", ErrInvalidActorID, p)
	}
	name, err := DecodeNameHex(nameHex)
	if err != nil {
		return ActorID{}, fmt.Errorf("path %q: %w", p, err)
	}
	id := ActorID{Tenant: tenant, Class: class, Name: name}
	if err := id.Validate(); err != nil {
		return ActorID{}, err
	}
	return id, nil
}

// DecodeNameHex reads a name written by [ActorID.NameHex]: non-empty
// lowercase hex of even length, at most MaxNameLen bytes decoded.
func DecodeNameHex(s string) (string, error) {
	if s == "" || len(s)%2 != 0 || len(s) > 2*MaxNameLen {
		return "", fmt.Errorf("%w: the name as hex %q is not 2 to %d lowercase hex digits", ErrInvalidActorID, s, 2*MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("%w: the name as hex %q is not lowercase hex", ErrInvalidActorID, s)
		}
	}
	var buf [MaxNameLen]byte
	n, _ := hex.Decode(buf[:], []byte(s))
	return string(buf[:n]), nil
}

// ActorError is an error about one actor: what was being done (Op, which
// may be empty) and the cause. Every package wraps failures of an actor in
// it, once: an ActorError whose cause is an ActorError of the same actor
// names the actor once, its operations in order.
type ActorError struct {
	ID  ActorID
	Op  string
	Err error
}

// Error gives "actor <id>: <op>: <cause>".
func (e *ActorError) Error() string {
	var b strings.Builder
	b.WriteString("actor ")
	b.WriteString(e.ID.String())
	cur := e
	for {
		if cur.Op != "" {
			b.WriteString(": ")
			b.WriteString(cur.Op)
		}
		inner, ok := cur.Err.(*ActorError)
		if !ok || inner.ID != e.ID {
			break
		}
		cur = inner
	}
	if cur.Err != nil {
		b.WriteString(": ")
		b.WriteString(cur.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *ActorError) Unwrap() error { return e.Err }

// WrapActor wraps err as an *ActorError of id doing op; nil stays nil.
func WrapActor(id ActorID, op string, err error) error {
	if err == nil {
		return nil
	}
	return &ActorError{ID: id, Op: op, Err: err}
}
