package wasmkeep

import (
	"bytes"
	"fmt"
)

// maxActorIDLen is the longest identity the host writes: "tenant/class/name"
// with a 63-byte tenant and class and a 100-byte name (abi.MaxActorIDLen).
const maxActorIDLen = 63 + 1 + 63 + 1 + 100

// ActorID is an actor's identity: its tenant, its class and its name. The
// tenant and the class are 1 to 63 bytes of a-z, 0-9, '-' and '_'; the name
// is 1 to 100 bytes of anything, '/' included.
type ActorID struct {
	Tenant, Class, Name string
}

// String gives "tenant/class/name", as the host writes it.
func (id ActorID) String() string { return id.Tenant + "/" + id.Class + "/" + id.Name }

// Self returns the identity of the actor the event runs in. It is the same
// on every node and for the life of the actor, so a guest can use it as a
// stable name (in a message it sends, or a log line). Errors: a *HostError
// wrapping EPERM outside an event (from an init function, say).
func Self() (ActorID, error) {
	var buf [maxActorIDLen]byte
	var n uint32
	errno := hostActorID(&buf[0], uint32(len(buf)), &n)
	if errno == uint32(E2BIG) || errno == 0 && n > uint32(len(buf)) {
		// The ABI bounds the identity, so this is a host out of step
		// with this SDK.
		return ActorID{}, fmt.Errorf("wasmkeep: actor-id: the host gave an identity of %d bytes, over the ABI's %d: %w",
			n, len(buf), &HostError{Op: "actor-id", Errno: E2BIG})
	}
	if err := check("actor-id", errno); err != nil {
		return ActorID{}, err
	}
	return parseActorID(buf[:n])
}

// parseActorID reads "tenant/class/name": the tenant and the class hold no
// '/', so the name is everything after the second one.
func parseActorID(b []byte) (ActorID, error) {
	t, rest, ok1 := bytes.Cut(b, []byte("/"))
	c, name, ok2 := bytes.Cut(rest, []byte("/"))
	if !ok1 || !ok2 || len(t) == 0 || len(c) == 0 || len(name) == 0 {
		return ActorID{}, fmt.Errorf("wasmkeep: actor-id: the host gave %q, not tenant/class/name", b)
	}
	return ActorID{Tenant: string(t), Class: string(c), Name: string(name)}, nil
}
