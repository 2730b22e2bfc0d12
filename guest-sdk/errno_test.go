//go:build !wasip1

package wasmkeep

import (
	"errors"
	"strings"
	"testing"
)

func TestErrnoNumbersAndNames(t *testing.T) {
	// The numbers are the ABI's (WASI preview 1); a host built against
	// abi/abi.go returns these.
	tests := []struct {
		e    Errno
		num  uint32
		name string
	}{
		{E2BIG, 1, "E2BIG"},
		{EFAULT, 21, "EFAULT"},
		{EINVAL, 28, "EINVAL"},
		{EIO, 29, "EIO"},
		{ENOENT, 44, "ENOENT"},
		{EPERM, 63, "EPERM"},
		{Errno(99), 99, "errno 99"},
	}
	for _, tt := range tests {
		if uint32(tt.e) != tt.num {
			t.Errorf("%s = %d, want %d", tt.name, uint32(tt.e), tt.num)
		}
		if got := tt.e.Name(); got != tt.name {
			t.Errorf("Errno(%d).Name() = %q, want %q", tt.num, got, tt.name)
		}
		if got := tt.e.Error(); !strings.HasPrefix(got, tt.name) {
			t.Errorf("Errno(%d).Error() = %q, want it to start with %q", tt.num, got, tt.name)
		}
	}
}

func TestCheckWrapsErrnoWithTheImportName(t *testing.T) {
	if err := check("kv-put", 0); err != nil {
		t.Fatalf("check(0) = %v, want nil", err)
	}
	err := check("kv-put", uint32(E2BIG))
	if !errors.Is(err, E2BIG) || errors.Is(err, EIO) {
		t.Errorf("errors.Is on %v: want E2BIG only", err)
	}
	var e Errno
	if !errors.As(err, &e) || e != E2BIG {
		t.Errorf("errors.As(%v, *Errno) gave %v, want E2BIG", err, e)
	}
	var he *HostError
	if !errors.As(err, &he) || he.Op != "kv-put" {
		t.Errorf("errors.As(%v, *HostError) gave %+v, want Op kv-put", err, he)
	}
	if got := err.Error(); got != "wasmkeep: kv-put: E2BIG (key or value too long)" {
		t.Errorf("message %q", got)
	}
}

func TestNotFoundSentinelsAreENOENT(t *testing.T) {
	for _, err := range []error{ErrNotSet, ErrNotFound} {
		if !errors.Is(err, ENOENT) {
			t.Errorf("errors.Is(%v, ENOENT) = false", err)
		}
	}
	if errors.Is(ErrNotSet, ErrNotFound) || errors.Is(ErrNotFound, ErrNotSet) {
		t.Error("ErrNotSet and ErrNotFound must be told apart")
	}
}
