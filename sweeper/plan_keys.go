package sweeper

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Actor identifies an actor: its tenant, class and name.
type Actor struct {
	Tenant string
	Class  string
	Name   string
}

// String returns tenant/class/name, with the name quoted.
func (a Actor) String() string { return fmt.Sprintf("%s/%s/%q", a.Tenant, a.Class, a.Name) }

// Key is what the sweep needs of a parsed index key: whose alarm it lists and
// when it is due.
type Key struct {
	Actor  Actor
	DueMs  int64
	Legacy bool
}

// indexRoot is the first segment of every index key.
const indexRoot = "alarms/"

// tenantPrefix is the listing prefix of a tenant's index.
func tenantPrefix(tenant string) string { return indexRoot + tenant + "/" }

// parseKey parses a tagged
// (alarms/<tenant>/<due, 15 digits>/<class>.t/<name hex>/<gen, 20 digits>-<nonce hex>)
// or legacy (alarms/<tenant>/<due>/<class>/<name hex>) index key.
func parseKey(s string) (Key, error) {
	rest, ok := strings.CutPrefix(s, indexRoot)
	if !ok {
		return Key{}, fmt.Errorf("index key %q: not under %q", s, indexRoot)
	}
	seg := strings.Split(rest, "/")
	if len(seg) != 4 && len(seg) != 5 {
		return Key{}, fmt.Errorf("index key %q: %d segments after %q, want 4 or 5", s, len(seg), indexRoot)
	}
	var k Key
	k.Actor.Tenant = seg[0]
	if k.Actor.Tenant == "" {
		return Key{}, fmt.Errorf("index key %q: empty tenant", s)
	}
	if len(seg[1]) != 15 {
		return Key{}, fmt.Errorf("index key %q: due time %q is not 15 digits", s, seg[1])
	}
	due, err := strconv.ParseInt(seg[1], 10, 64)
	if err != nil || due < 0 {
		return Key{}, fmt.Errorf("index key %q: due time %q is not 15 digits", s, seg[1])
	}
	k.DueMs = due
	class := seg[2]
	if len(seg) == 5 {
		c, ok := strings.CutSuffix(class, ".t")
		if !ok {
			return Key{}, fmt.Errorf("index key %q: tagged entry outside a %q folder", s, ".t")
		}
		class = c
		if err := checkTag(seg[4]); err != nil {
			return Key{}, fmt.Errorf("index key %q: %w", s, err)
		}
	} else {
		k.Legacy = true
	}
	if class == "" || strings.Contains(class, ".") {
		return Key{}, fmt.Errorf("index key %q: bad class %q", s, class)
	}
	k.Actor.Class = class
	name, err := hex.DecodeString(seg[3])
	if err != nil {
		return Key{}, fmt.Errorf("index key %q: name is not hex: %w", s, err)
	}
	k.Actor.Name = string(name)
	return k, nil
}

// checkTag checks a <generation, 20 digits>-<nonce hex> tag.
func checkTag(tag string) error {
	gen, nonce, ok := strings.Cut(tag, "-")
	if !ok || len(gen) != 20 {
		return errors.New("tag is not <generation, 20 digits>-<nonce>")
	}
	if _, err := strconv.ParseUint(gen, 10, 64); err != nil {
		return fmt.Errorf("tag generation %q: %w", gen, err)
	}
	if _, err := hex.DecodeString(nonce); err != nil || nonce == "" {
		return fmt.Errorf("tag nonce %q is not hex", nonce)
	}
	return nil
}
