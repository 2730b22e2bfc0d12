package alarmindex

import (
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
)

// NoncePrefixBytes is how many random bytes a [NonceSource] reads at boot.
const NoncePrefixBytes = 8

// Nonces gives nonces for new index entries. Every value must be non-empty
// lowercase hex and never handed out before by this process, nor by an
// earlier run of the same node. [NonceSource] is the implementation.
type Nonces interface {
	Next() string
}

// NonceSource gives nonces made of a boot prefix (random bytes read once)
// and a counter: a process never repeats one, and a restarted node draws a
// new prefix, so it does not repeat those of its earlier runs either (two
// runs share a prefix with probability 2^-64). Safe for concurrent use.
type NonceSource struct {
	prefix string
	n      atomic.Uint64
}

// NewNonceSource reads NoncePrefixBytes from rand for the boot prefix.
// Production passes crypto/rand.Reader; a deterministic simulator passes a
// seeded source (for example math/rand/v2's ChaCha8).
func NewNonceSource(rand io.Reader) (*NonceSource, error) {
	var b [NoncePrefixBytes]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return nil, fmt.Errorf("alarm index: reading the nonce boot prefix: %w", err)
	}
	return &NonceSource{prefix: hex.EncodeToString(b[:])}, nil
}

// Next returns a new nonce: 32 lowercase hex digits, the boot prefix then the
// counter.
func (s *NonceSource) Next() string {
	n := s.n.Add(1)
	if n == 0 {
		// 2^64 nonces in one run: unreachable, but never wrap into reuse.
		panic("alarm index: nonce counter exhausted")
	}
	c := strconv.FormatUint(n, 16)
	return s.prefix + "0000000000000000"[len(c):] + c
}
