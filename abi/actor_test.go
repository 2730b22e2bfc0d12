package abi_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
)

// longest is the longest identity Validate accepts, its name any bytes.
func longest() abi.ActorID {
	name := strings.Repeat("\x00/\xff.", abi.MaxNameLen/4)
	return abi.ActorID{
		Tenant: "t" + strings.Repeat("-", abi.MaxTenantLen-2) + "9",
		Class:  "c" + strings.Repeat("_", abi.MaxClassLen-1),
		Name:   name,
	}
}

func TestValidateStatesEachLimit(t *testing.T) {
	long := longest()
	for _, tc := range []struct {
		name string
		id   abi.ActorID
		says string // "" for valid
	}{
		{"the longest", long, ""},
		{"a plain one", abi.ActorID{Tenant: "acme", Class: "counter", Name: "c1"}, ""},
		{"digits first", abi.ActorID{Tenant: "9t", Class: "0c", Name: "n"}, ""},
		{"a name of any bytes", abi.ActorID{Tenant: "t", Class: "c", Name: "../\x00\\x"}, ""},
		{"a tenant one over", abi.ActorID{Tenant: long.Tenant + "x", Class: "c", Name: "n"}, "the tenant is 64 bytes, over the limit of 63 bytes"},
		{"a class one over", abi.ActorID{Tenant: "t", Class: long.Class + "x", Name: "n"}, "the class is 64 bytes, over the limit of 63 bytes"},
		{"a name one over", abi.ActorID{Tenant: "t", Class: "c", Name: long.Name + "x"}, "the name is 101 bytes, over the limit of 100 bytes"},
		{"a name of 1,000 bytes", abi.ActorID{Tenant: "t", Class: "c", Name: strings.Repeat("n", 1000)}, "the name is 1000 bytes, over the limit of 100 bytes"},
		{"an empty tenant", abi.ActorID{Class: "c", Name: "n"}, "the tenant is empty"},
		{"an empty class", abi.ActorID{Tenant: "t", Name: "n"}, "the class is empty"},
		{"an empty name", abi.ActorID{Tenant: "t", Class: "c"}, "the name is empty"},
		{"a tenant of ..", abi.ActorID{Tenant: "..", Class: "c", Name: "n"}, `the tenant ".." does not start with a lowercase letter or a digit`},
		{"a tenant with '/'", abi.ActorID{Tenant: "t/u", Class: "c", Name: "n"}, `the tenant "t/u" holds '/'`},
		{"a class with '.'", abi.ActorID{Tenant: "t", Class: "a.b", Name: "n"}, `the class "a.b" holds '.'`},
		{"an uppercase class", abi.ActorID{Tenant: "t", Class: "Room", Name: "n"}, `the class "Room" does not start`},
		{"an uppercase letter inside", abi.ActorID{Tenant: "aCme", Class: "c", Name: "n"}, `the tenant "aCme" holds 'C'`},
		{"a tenant starting with '-'", abi.ActorID{Tenant: "-t", Class: "c", Name: "n"}, `the tenant "-t" does not start`},
		{"a tenant of NUL", abi.ActorID{Tenant: "t\x00", Class: "c", Name: "n"}, `the tenant "t\x00" holds '\x00'`},
		{"a class of UTF-8", abi.ActorID{Tenant: "t", Class: "cé", Name: "n"}, `the class "cé" holds`},
	} {
		err := tc.id.Validate()
		if tc.says == "" {
			if err != nil {
				t.Errorf("%s: %v, want valid", tc.name, err)
			}
			continue
		}
		var ae *abi.ActorError
		if err == nil || !strings.Contains(err.Error(), tc.says) || !errors.Is(err, abi.ErrInvalidActorID) || !errors.As(err, &ae) || ae.ID != tc.id {
			t.Errorf("%s: %v, want an *ActorError wrapping ErrInvalidActorID saying %q", tc.name, err, tc.says)
		}
	}
}

func TestPathRoundTripsAndNeverCollides(t *testing.T) {
	ids := []abi.ActorID{
		longest(),
		{Tenant: "t", Class: "c", Name: "a"},
		{Tenant: "t", Class: "c", Name: "A"},
		{Tenant: "t", Class: "c", Name: "a/b"},
		{Tenant: "t", Class: "c/a", Name: "b"},
		{Tenant: "t", Class: "c", Name: "\x00"},
		{Tenant: "t", Class: "c", Name: "\x00\x00"},
	}
	seen := map[string]abi.ActorID{}
	for _, id := range ids {
		p := id.Path()
		if other, dup := seen[p]; dup {
			t.Fatalf("%s and %s share the path %q", id, other, p)
		}
		seen[p] = id
		got, err := abi.ParsePath(p)
		if id.Validate() != nil {
			if err == nil {
				t.Errorf("ParsePath(%q) accepted an invalid identity", p)
			}
			continue
		}
		if err != nil || got != id {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", p, got, err, id)
		}
		// Every component fits a file name, with the longest companion
		// of the database file.
		for _, c := range strings.Split(p+".db.replaced", "/") {
			if len(c) > 255 {
				t.Errorf("%s: component %q is %d bytes, over 255", id, c, len(c))
			}
		}
	}
}

func TestParsePathRefusesWhatPathNeverWrites(t *testing.T) {
	for _, p := range []string{
		"", "t/c", "t/c/6e/6e", "t/c/", "t/c/6E", "t/c/6", "t/c/zz",
		"T/c/6e", "t/a.b/6e", "../c/6e",
		"t/c/" + strings.Repeat("6e", abi.MaxNameLen+1),
	} {
		if id, err := abi.ParsePath(p); err == nil || !errors.Is(err, abi.ErrInvalidActorID) {
			t.Errorf("ParsePath(%q) = %+v, %v; want an ErrInvalidActorID", p, id, err)
		}
	}
}

// The node timer's key is made and read at every firing: each of Path and
// ParsePath allocates its result only.
func TestPathAndParsePathAllocateOnlyTheirResult(t *testing.T) {
	id := abi.ActorID{Tenant: "tenant-a", Class: "counter", Name: strings.Repeat("n", abi.MaxNameLen)}
	p := id.Path()
	if got := testing.AllocsPerRun(100, func() { p = id.Path() }); got != 1 {
		t.Errorf("Path: %v allocations, want 1", got)
	}
	var back abi.ActorID
	if got := testing.AllocsPerRun(100, func() { back, _ = abi.ParsePath(p) }); got != 1 {
		t.Errorf("ParsePath: %v allocations, want 1", got)
	}
	if back != id {
		t.Errorf("ParsePath(Path()) = %+v, want %+v", back, id)
	}
}

func TestStringQuotesAndCutsHostileNames(t *testing.T) {
	for _, tc := range []struct {
		id   abi.ActorID
		want string
	}{
		{abi.ActorID{Tenant: "t", Class: "c", Name: "lobby/1"}, "t/c/lobby/1"},
		{abi.ActorID{Tenant: "t", Class: "c", Name: "a\nb"}, `t/c/"a\nb"`},
		{abi.ActorID{Tenant: "t", Class: "c", Name: strings.Repeat("n", 1000)}, "t/c/" + strings.Repeat("n", abi.MaxNameLen) + "...(1000 bytes)"},
		{abi.ActorID{Tenant: strings.Repeat("t", 70), Class: "c", Name: "n"}, strings.Repeat("t", 63) + "...(70 bytes)/c/n"},
	} {
		if got := tc.id.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestActorErrorNamesTheActorOnce(t *testing.T) {
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "n"}
	other := abi.ActorID{Tenant: "t", Class: "c", Name: "m"}
	cause := errors.New("disk full")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&abi.ActorError{ID: id, Op: "replicate", Err: cause}, "actor t/c/n: replicate: disk full"},
		{&abi.ActorError{ID: id, Err: cause}, "actor t/c/n: disk full"},
		{&abi.ActorError{ID: id, Op: "deliver", Err: &abi.ActorError{ID: id, Op: "upload", Err: cause}}, "actor t/c/n: deliver: upload: disk full"},
		{&abi.ActorError{ID: id, Op: "forward", Err: &abi.ActorError{ID: other, Op: "upload", Err: cause}}, "actor t/c/n: forward: actor t/c/m: upload: disk full"},
		{&abi.ActorError{ID: id, Op: "deliver", Err: fmt.Errorf("index: %w", &abi.ActorError{ID: id, Err: cause})}, "actor t/c/n: deliver: index: actor t/c/n: disk full"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, cause) {
			t.Errorf("%q does not wrap its cause", tc.err)
		}
	}
	if abi.WrapActor(id, "x", nil) != nil {
		t.Error("WrapActor(nil) is not nil")
	}
}
