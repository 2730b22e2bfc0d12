package alarmindex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/format"
)

func TestKeyRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		key  Key
		want string
	}{
		{
			"tagged",
			Key{Actor: abi.ActorID{Tenant: "acme", Class: "counter", Name: "a"}, DueMs: 1_700_000_000_123, Tag: Tag{Generation: 42, Nonce: "beef01"}},
			"alarms/acme/001700000000123/counter.t/61/00000000000000000042-beef01",
		},
		{
			"legacy",
			Key{Actor: abi.ActorID{Tenant: "acme", Class: "counter", Name: "a"}, DueMs: 5, Legacy: true},
			"alarms/acme/000000000000005/counter/61",
		},
		{
			"name with slash, dot and binary bytes",
			Key{Actor: abi.ActorID{Tenant: "t", Class: "c", Name: "x/../\x00\xff"}, DueMs: 0, Tag: Tag{Generation: 0, Nonce: "0"}},
			"alarms/t/000000000000000/c.t/782f2e2e2f00ff/00000000000000000000-0",
		},
		{
			"largest due time and generation",
			Key{Actor: abi.ActorID{Tenant: "t", Class: "c", Name: "n"}, DueMs: MaxDueMs, Tag: Tag{Generation: ^uint64(0), Nonce: "f"}},
			"alarms/t/999999999999999/c.t/6e/18446744073709551615-f",
		},
		{
			"tenant and class with '-' and '_'",
			Key{Actor: abi.ActorID{Tenant: "acme-eu_1", Class: "chat_room-2", Name: "n"}, DueMs: 1, Legacy: true},
			"alarms/acme-eu_1/000000000000001/chat_room-2/6e",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.key.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := c.key.String(); got != c.want {
				t.Fatalf("String() = %q, want %q", got, c.want)
			}
			got, err := ParseKey(c.want)
			if err != nil {
				t.Fatalf("ParseKey: %v", err)
			}
			if got != c.key {
				t.Fatalf("ParseKey = %+v, want %+v", got, c.key)
			}
			if !strings.HasPrefix(c.want, TimePrefix(c.key.Actor.Tenant, c.key.DueMs)) {
				t.Fatalf("key %q not under TimePrefix", c.want)
			}
			if !strings.HasPrefix(c.want, TenantPrefix(c.key.Actor.Tenant)) {
				t.Fatalf("key %q not under TenantPrefix", c.want)
			}
			if c.key.Legacy {
				if LegacyKey(c.key.Actor, c.key.DueMs) != c.want {
					t.Fatalf("LegacyKey differs from String")
				}
			} else if !strings.HasPrefix(c.want, TaggedPrefix(c.key.Actor, c.key.DueMs)) {
				t.Fatalf("tagged key %q not under TaggedPrefix", c.want)
			}
		})
	}
}

func TestParseKeyRejects(t *testing.T) {
	cases := []struct{ name, key, cause string }{
		{"no root", "alarm/t/000000000000001/c/6e", "does not start"},
		{"too few segments", "alarms/t/000000000000001/c", "segments"},
		{"too many segments", "alarms/t/000000000000001/c.t/6e/00000000000000000001-a/x", "segments"},
		{"due 14 digits", "alarms/t/00000000000001/c/6e", "15 digits"},
		{"due 16 digits", "alarms/t/0000000000000001/c/6e", "15 digits"},
		{"due signed", "alarms/t/+00000000000001/c/6e", "15 digits"},
		{"empty tenant", "alarms//000000000000001/c/6e", "tenant is empty"},
		{"empty class", "alarms/t/000000000000001//6e", "class is empty"},
		{"legacy class with dot", "alarms/t/000000000000001/c.t/6e", `class "c.t" holds '.'`},
		{"tagged class with dot", "alarms/t/000000000000001/a.b.t/6e/00000000000000000001-a", `class "a.b" holds '.'`},
		{"uppercase class", "alarms/t/000000000000001/Room/6e", `class "Room" does not start`},
		{"name over the limit", "alarms/t/000000000000001/c/" + strings.Repeat("6e", 101), "not 2 to 200 lowercase hex digits"},
		{"tagged folder without .t", "alarms/t/000000000000001/c/6e/00000000000000000001-a", "does not end in .t"},
		{"empty name", "alarms/t/000000000000001/c/", "name"},
		{"uppercase name hex", "alarms/t/000000000000001/c/6E", "name"},
		{"odd name hex", "alarms/t/000000000000001/c/6e6", "name"},
		{"generation 19 digits", "alarms/t/000000000000001/c.t/6e/0000000000000000001-a", "20 digits"},
		{"generation overflow", "alarms/t/000000000000001/c.t/6e/99999999999999999999-a", "overflows"},
		{"tag without dash", "alarms/t/000000000000001/c.t/6e/00000000000000000001", "no '-'"},
		{"empty nonce", "alarms/t/000000000000001/c.t/6e/00000000000000000001-", "nonce"},
		{"uppercase nonce", "alarms/t/000000000000001/c.t/6e/00000000000000000001-AB", "nonce"},
		{"invalid utf-8 tenant", "alarms/\xff/000000000000001/c/6e", "tenant \"\\xff\" does not start"},
		{"too long", "alarms/t/000000000000001/c/" + strings.Repeat("6e", 600), "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseKey(c.key)
			if err == nil {
				t.Fatalf("ParseKey(%q) accepted", c.key)
			}
			if !strings.Contains(err.Error(), c.cause) {
				t.Fatalf("error %q does not name the cause %q", err, c.cause)
			}
		})
	}
}

func TestKeyValidateRejectsTooLongName(t *testing.T) {
	k := Key{Actor: abi.ActorID{Tenant: "t", Class: "c", Name: strings.Repeat("x", 500)}, DueMs: 1, Tag: Tag{1, "ab"}}
	if err := k.Validate(); err == nil || !strings.Contains(err.Error(), "the name is 500 bytes, over the limit of 100 bytes") {
		t.Fatalf("Validate() = %v, want a too-long error", err)
	}
}

// The longest identity abi accepts, at the latest time and the largest
// generation, with a nonce as NonceSource makes them, gives a valid key of
// 407 bytes: well within S3's 1,024, and no segment over the 255 bytes a
// file-backed store (versitygw's posix backend) keeps in a name.
func TestTheLongestIdentityFitsAKey(t *testing.T) {
	src, err := NewNonceSource(strings.NewReader(strings.Repeat("\xff", NoncePrefixBytes)))
	if err != nil {
		t.Fatal(err)
	}
	k := Key{
		Actor: abi.ActorID{Tenant: strings.Repeat("t", abi.MaxTenantLen), Class: strings.Repeat("c", abi.MaxClassLen), Name: strings.Repeat("\xff", abi.MaxNameLen)},
		DueMs: MaxDueMs, Tag: Tag{Generation: ^uint64(0), Nonce: src.Next()},
	}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	s := k.String()
	if len(s) != 407 {
		t.Errorf("the longest key is %d bytes, want 407 (as abi's limits state)", len(s))
	}
	for _, seg := range strings.Split(s, "/") {
		if len(seg) > 255 {
			t.Errorf("segment %q is %d bytes", seg, len(seg))
		}
	}
	if got, err := ParseKey(s); err != nil || got != k {
		t.Fatalf("ParseKey = %+v, %v", got, err)
	}
	legacy := LegacyKey(k.Actor, k.DueMs)
	if got, err := ParseKey(legacy); err != nil || got.Actor != k.Actor {
		t.Fatalf("ParseKey(legacy) = %+v, %v", got, err)
	}
}

func TestRecordedRoundTrip(t *testing.T) {
	a := abi.ActorID{Tenant: "t", Class: "c", Name: "n"}
	cases := []struct {
		name string
		key  *Key
		want string
	}{
		{"none", nil, ""},
		{"legacy", &Key{Actor: a, DueMs: 12, Legacy: true}, "000000000000012"},
		{"tagged", &Key{Actor: a, DueMs: 12, Tag: Tag{3, "0a"}}, "000000000000012/00000000000000000003-0a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FormatRecorded(c.key); got != c.want {
				t.Fatalf("FormatRecorded = %q, want %q", got, c.want)
			}
			got, err := ParseRecorded(a, c.want)
			if err != nil {
				t.Fatalf("ParseRecorded: %v", err)
			}
			if (got == nil) != (c.key == nil) || (got != nil && *got != *c.key) {
				t.Fatalf("ParseRecorded = %+v, want %+v", got, c.key)
			}
		})
	}
	for _, bad := range []string{"12", "000000000000012/", "000000000000012/3-0a", "000000000000012/00000000000000000003-", "x"} {
		if _, err := ParseRecorded(a, bad); err == nil || !strings.Contains(err.Error(), "t/c/n") {
			t.Errorf("ParseRecorded(%q) = %v, want an error naming the actor", bad, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"alarms/acme/001700000000123/counter.t/61/00000000000000000042-beef01",
		"alarms/acme/000000000000005/counter/61",
		"alarms/t/999999999999999/c.t/6e/18446744073709551615-f",
		"alarms/t/000000000000001/c.t/6e/99999999999999999999-a",
		"alarms//000000000000001/c/6e",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			return
		}
		if got := k.String(); got != s {
			t.Fatalf("ParseKey(%q).String() = %q", s, got)
		}
		if err := k.Validate(); err != nil {
			t.Fatalf("parsed key %q does not validate: %v", s, err)
		}
		k2, err := ParseKey(k.String())
		if err != nil || k2 != k {
			t.Fatalf("reparse of %q: %+v, %v", s, k2, err)
		}
		rec := FormatRecorded(&k)
		back, err := ParseRecorded(k.Actor, rec)
		if err != nil || back == nil || *back != k {
			t.Fatalf("recorded %q of %q: %+v, %v", rec, s, back, err)
		}
	})
}

// Key.String, written in one piece, gives what its parts give (and what
// the format strings they replaced gave), for any actor, due time, tag.
func TestKeyStringIsItsParts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		name := make([]byte, r.IntN(40))
		for i := range name {
			name[i] = byte(r.IntN(256))
		}
		k := Key{
			Actor: abi.ActorID{Tenant: fmt.Sprintf("t%d", r.IntN(100)), Class: fmt.Sprintf("c%d", r.IntN(10)), Name: string(name)},
			DueMs: r.Int64N(MaxDueMs+1) >> r.IntN(50),
			Tag:   Tag{Generation: r.Uint64() >> r.IntN(64), Nonce: fmt.Sprintf("%x", r.Uint32())},
		}
		if r.IntN(20) == 0 {
			k.DueMs = -k.DueMs - 1 // never valid, still written
		}
		want := fmt.Sprintf("%s%s/%0*d/%s.t/%x/%0*d-%s", Root, k.Actor.Tenant, dueDigits, k.DueMs, k.Actor.Class, name, genDigits, k.Tag.Generation, k.Tag.Nonce)
		if got := k.String(); got != want || got != TaggedPrefix(k.Actor, k.DueMs)+k.Tag.String() {
			t.Fatalf("String() = %q, want %q", got, want)
		}
		if got, want := FormatRecorded(&k), fmt.Sprintf("%0*d/%0*d-%s", dueDigits, k.DueMs, genDigits, k.Tag.Generation, k.Tag.Nonce); got != want {
			t.Fatalf("FormatRecorded = %q, want %q", got, want)
		}
	}
}

// Index entries are at format 1: the tagged entries this build writes
// (<class>.t) and the legacy ones it reads. An entry of a later format
// (<class>.v<N>) is refused with a *format.NewerError naming the version,
// whatever follows its due time; only its tenant and due time are read,
// which every format keeps in place. A version folder of 1 or below, or
// not in plain decimal, is malformed.
func TestParseKeyFormats(t *testing.T) {
	a := abi.ActorID{Tenant: "acme", Class: "counter", Name: "a"}
	written := Key{Actor: a, DueMs: 1234, Tag: Tag{Generation: 7, Nonce: "ab"}}.String()
	if !strings.Contains(written, "/counter"+TaggedClassSuffix+"/") || format.IndexVersion != 1 {
		t.Fatalf("this build writes %q, want the class folder of format 1 (%s)", written, TaggedClassSuffix)
	}
	for _, k := range []string{written, "alarms/acme/000000000001234/counter/61"} {
		if _, err := ParseKey(k); err != nil {
			t.Errorf("ParseKey(%q) of format 1: %v", k, err)
		}
	}
	for _, c := range []struct {
		key     string
		version int
	}{
		{"alarms/acme/000000000001234/counter.v2/61/00000000000000000007-ab", 2},
		{"alarms/acme/000000000001234/counter.v2/anything/else/at/all", 2},
		{"alarms/acme/000000000001234/counter.v17", 17},
	} {
		k, err := ParseKey(c.key)
		ne, ok := format.As(err)
		if !ok || ne.Kind != format.IndexEntry || ne.Version != c.version || ne.Known != 1 {
			t.Errorf("ParseKey(%q): %v, want a newer index entry format %d", c.key, err, c.version)
			continue
		}
		if !strings.Contains(err.Error(), c.key) {
			t.Errorf("ParseKey(%q): %q does not name the key", c.key, err)
		}
		if k != (Key{Actor: abi.ActorID{Tenant: "acme"}, DueMs: 1234}) {
			t.Errorf("ParseKey(%q) = %+v, want the tenant and the due time alone", c.key, k)
		}
	}
	for _, k := range []string{
		"alarms/acme/000000000001234/counter.v1/61/00000000000000000007-ab",
		"alarms/acme/000000000001234/counter.v0/61",
		"alarms/acme/000000000001234/counter.v02/61",
		"alarms/acme/000000000001234/counter.vx/61",
		"alarms/acme/000000000001234/counter.v/61",
		"alarms/acme/1234/counter.v2/61",
		"alarms/Acme/000000000001234/counter.v2/61",
	} {
		if _, err := ParseKey(k); err == nil || errors.Is(err, format.ErrNewer) {
			t.Errorf("ParseKey(%q): %v, want it malformed", k, err)
		}
	}
}
