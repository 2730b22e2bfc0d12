package main

import (
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/internal/testguest"
)

// The demo passes its own checks with the Go reminders: each reminder sent
// once, the late one after the restart, and the interval ticking.
func TestTheDemoRuns(t *testing.T) {
	var out strings.Builder
	if err := run(&out, testguest.Build(t, "guest-sdk/examples/reminders")); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{`"whoami"`, `-> "demo/reminders/ann"`, "== node 2 up", "was sent once"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out.String())
		}
	}
}
