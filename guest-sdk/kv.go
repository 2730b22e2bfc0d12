package wasmkeep

import (
	"errors"
	"unsafe"
)

// getBufSize is the size of the first buffer Get offers the host; a longer
// value takes a second call with a buffer of its exact length.
const getBufSize = 256

// Get returns the value stored under key in the actor's key/value table, or
// ErrNotFound. The slice is the caller's to keep. Other errors: a *HostError
// wrapping EPERM outside an event or EIO when the host's database fails.
func Get(key string) ([]byte, error) {
	buf := make([]byte, getBufSize)
	// Within an event nothing else writes the table, so the second call
	// fits; the bound only keeps a misbehaving host from looping forever.
	for range 3 {
		var n uint32
		errno := hostKVGet(stringPtr(key), uint32(len(key)), bytesPtr(buf), uint32(len(buf)), &n)
		switch Errno(errno) {
		case 0:
		case ENOENT:
			return nil, ErrNotFound
		default:
			return nil, check("kv-get", errno)
		}
		if uint64(n) <= uint64(len(buf)) {
			return buf[:n:n], nil
		}
		buf = make([]byte, n)
	}
	return nil, errors.New("wasmkeep: kv-get: the value's length changed between calls")
}

// Put stores value under key in the actor's key/value table, replacing any
// value there. The write commits with the event: if the event fails, it is
// undone. Errors: a *HostError wrapping E2BIG when the key or value is longer
// than the host accepts (1 KiB and 1 MiB in the reference host), EPERM
// outside an event or EIO when the host's database fails.
func Put(key string, value []byte) error {
	return check("kv-put", hostKVPut(stringPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value))))
}

// Delete removes the value under key from the actor's key/value table.
// Deleting a key with no value is not an error. Like Put it commits with the
// event. Errors: a *HostError wrapping EPERM outside an event or EIO when the
// host's database fails.
func Delete(key string) error {
	errno := hostKVDelete(stringPtr(key), uint32(len(key)))
	if Errno(errno) == ENOENT {
		return nil
	}
	return check("kv-delete", errno)
}

// stringPtr is the address of s's bytes for the host to read (nil when s is
// empty; the host accepts address 0 with length 0).
func stringPtr(s string) *byte { return unsafe.StringData(s) }

// bytesPtr is the address of b's bytes (nil when b is nil).
func bytesPtr(b []byte) *byte { return unsafe.SliceData(b) }
