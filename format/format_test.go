package format_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/format"
)

// Every kind is at version 1; 0 (no version written) reads as 1; above 1
// is refused with a *format.NewerError naming the kind and both versions;
// below 0 is no version.
func TestCheck(t *testing.T) {
	for _, k := range append(slices.Clone(format.Kinds), format.ClusterRecord) {
		if format.Known(k) != 1 {
			t.Errorf("%s: known version %d, want 1", k, format.Known(k))
		}
		for _, v := range []int64{0, 1} {
			if err := format.Check(k, v); err != nil {
				t.Errorf("%s version %d: %v, want it read", k, v, err)
			}
		}
		err := format.Check(k, 2)
		ne, ok := format.As(fmt.Errorf("wrapped: %w", err))
		if !ok || ne.Kind != k || ne.Version != 2 || ne.Known != 1 || !errors.Is(err, format.ErrNewer) {
			t.Errorf("%s version 2: %v, want a *NewerError of version 2", k, err)
		}
		if msg := err.Error(); !strings.Contains(msg, string(k)) || !strings.Contains(msg, "version 2") || !strings.Contains(msg, "(up to 1)") {
			t.Errorf("%s version 2: %q does not name the kind and both versions", k, msg)
		}
		if err := format.Check(k, -1); err == nil || errors.Is(err, format.ErrNewer) {
			t.Errorf("%s version -1: %v, want an error that is no newer format", k, err)
		}
	}
}

// CheckJSON reads the "format" field alone, so a later record that
// changed any other field is refused for its version, not misread.
func TestCheckJSON(t *testing.T) {
	for _, c := range []struct {
		body  string
		newer int  // 0: not refused as newer
		err   bool // an error other than a newer format
	}{
		{`{"node_id":"a","generation":1}`, 0, false}, // before versions: 1
		{`{"format":1,"node_id":"a"}`, 0, false},
		{`{"format":null}`, 0, false},
		{`{"format":2,"node_id":"a"}`, 2, false},
		{`{"format":3,"generation":"not a number","node_id":{"x":1}}`, 3, false},
		{`{"format":"2"}`, 0, true},
		{`{"format":1.5}`, 0, true},
		{`{"format":-1}`, 0, true},
		{`not JSON`, 0, false}, // the caller's own parse says it is unreadable
		{`[1,2]`, 0, false},
	} {
		err := format.CheckJSON(format.Hold, []byte(c.body))
		ne, isNewer := format.As(err)
		switch {
		case c.newer != 0 && (!isNewer || ne.Version != c.newer || ne.Kind != format.Hold):
			t.Errorf("%s: %v, want a newer format %d", c.body, err, c.newer)
		case c.newer == 0 && isNewer:
			t.Errorf("%s: %v, want no newer format", c.body, err)
		case c.newer == 0 && c.err != (err != nil):
			t.Errorf("%s: %v, want an error %v", c.body, err, c.err)
		}
	}
}
