package bucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ProbePrefix is where CheckConditional writes (and then removes) its probe
// object, under a random name.
const ProbePrefix = "wasmkeep-probe/"

// CheckConditional verifies that b honours conditional writes: a PUT with
// If-None-Match: * on an existing key, and a PUT with a wrong If-Match, must
// both fail with ErrPrecondition, and a PUT with the right If-Match must
// succeed. Node leases, holds and the alarm index rely on this; a store that
// ignores the conditions would let two nodes own one actor. It returns nil,
// an error saying which condition the store ignored, or the request error
// that stopped the check. The probe object is removed afterwards.
func CheckConditional(ctx context.Context, b Bucket) (err error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	key := ProbePrefix + hex.EncodeToString(nonce[:])
	defer func() {
		if derr := b.Delete(ctx, key); derr != nil && err == nil {
			err = fmt.Errorf("conditional-write check: removing the probe: %w", derr)
		}
	}()
	unsupported := func(what string) error {
		return fmt.Errorf("conditional-write check on probe %q: the store %s; it does not honour conditional writes, which the cluster requires", key, what)
	}

	etag, err := b.Put(ctx, key, []byte("probe 1"), Cond{IfNoneMatch: true})
	if err != nil {
		return fmt.Errorf("conditional-write check: first PUT with If-None-Match: *: %w", err)
	}
	_, err = b.Put(ctx, key, []byte("probe 2"), Cond{IfNoneMatch: true})
	switch {
	case err == nil:
		return unsupported("accepted a second PUT with If-None-Match: * on an existing key")
	case !errors.Is(err, ErrPrecondition):
		return fmt.Errorf("conditional-write check: second PUT with If-None-Match: *: %w", err)
	}
	_, err = b.Put(ctx, key, []byte("probe 3"), Cond{IfMatch: `"00000000000000000000000000000000"`})
	switch {
	case err == nil:
		return unsupported("accepted a PUT with a wrong If-Match ETag")
	case !errors.Is(err, ErrPrecondition):
		return fmt.Errorf("conditional-write check: PUT with a wrong If-Match: %w", err)
	}
	if _, err = b.Put(ctx, key, []byte("probe 4"), Cond{IfMatch: etag}); err != nil {
		return fmt.Errorf("conditional-write check: PUT with the current ETag as If-Match: %w", err)
	}
	return nil
}
