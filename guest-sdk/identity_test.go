//go:build !wasip1

package wasmkeep

import (
	"errors"
	"strings"
	"testing"
)

func TestSelfReadsTheIdentityTheHostGives(t *testing.T) {
	h, _ := withHost(t)
	long := strings.Repeat("t", 63) + "/" + strings.Repeat("c", 63) + "/" + strings.Repeat("\xff", 100)
	for give, want := range map[string]ActorID{
		"acme/counter/c1":     {"acme", "counter", "c1"},
		"acme/counter/a/b/c/": {"acme", "counter", "a/b/c/"},
		long:                  {strings.Repeat("t", 63), strings.Repeat("c", 63), strings.Repeat("\xff", 100)},
	} {
		h.id = give
		got, err := Self()
		if err != nil || got != want {
			t.Errorf("host gives %q: Self() = %+v, %v; want %+v", give, got, err, want)
		}
		if got.String() != give {
			t.Errorf("String() = %q, want %q", got.String(), give)
		}
	}
}

func TestSelfRefusesWhatIsNotAnIdentity(t *testing.T) {
	h, _ := withHost(t)
	for _, give := range []string{"", "acme", "acme/counter", "acme/counter/", "/counter/c1", "acme//c1"} {
		h.id = give
		if id, err := Self(); err == nil || !strings.Contains(err.Error(), "not tenant/class/name") {
			t.Errorf("host gives %q: Self() = %+v, %v; want an error saying it is not tenant/class/name", give, id, err)
		}
	}
	h.id = strings.Repeat("x", maxActorIDLen+1)
	if _, err := Self(); err == nil || !strings.Contains(err.Error(), "over the ABI's 228") {
		t.Errorf("an identity longer than the ABI allows: %v", err)
	}
}

func TestSelfOutsideAnEventIsEPERM(t *testing.T) {
	h, _ := withHost(t)
	h.fail["actor-id"] = uint32(EPERM)
	_, err := Self()
	var he *HostError
	if !errors.As(err, &he) || he.Op != "actor-id" || !errors.Is(err, EPERM) {
		t.Fatalf("Self() error %v, want a *HostError for actor-id wrapping EPERM", err)
	}
}
