package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The bounds are the issue's, each checked against the baseline of the
// same run: a load past any of them fails the run (exit 1).
func TestJudgeFailsEachBoundPassed(t *testing.T) {
	o := &options{latenessFactor: 3, latenessSlack: 100 * time.Millisecond, readFactor: 3, readSlack: 100 * time.Millisecond, minFired: .95, minBRatio: .5}
	base := result{load: "baseline", latP99: 20 * time.Millisecond, readP99: 10 * time.Millisecond, fired: 100, expected: 100}
	good := result{load: "spin", latP99: 160 * time.Millisecond, readP99: 130 * time.Millisecond, fired: 95, expected: 100, bRate: 5, bAlone: 10}
	for _, tc := range []struct {
		name string
		mod  func(r *result)
		want string // in the failure; "" for none
	}{
		{"within every bound", func(*result) {}, ""},
		{"lateness", func(r *result) { r.latP99 = 161 * time.Millisecond }, "lateness p99"},
		{"reads", func(r *result) { r.readP99 = 131 * time.Millisecond }, "read p99"},
		{"firings", func(r *result) { r.fired = 94 }, "fired 94 of 100"},
		{"lapse", func(r *result) { r.lapses = 1 }, "1 lease lapses"},
		{"takeover", func(r *result) { r.takeovers = 2 }, "taken over"},
		{"B starved", func(r *result) { r.bRate = 4.9 }, "B's rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.mod(&r)
			results := []result{base, r}
			ok := judge(o, results)
			got := strings.Join(results[1].failures, "; ")
			if ok != (tc.want == "") || (tc.want != "" && !strings.Contains(got, tc.want)) {
				t.Fatalf("judge = %v, failures %q; want a failure saying %q", ok, got, tc.want)
			}
		})
	}
}

// A's lateness counts the firings scheduled in the window, and a
// percentile is the value at that rank.
func TestLatenessAndPercentiles(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	var fs []firing
	for i := range 100 {
		at := t0.Add(time.Duration(i) * time.Second)
		fs = append(fs, firing{scheduled: at, ran: at.Add(time.Duration(i+1) * time.Millisecond)})
	}
	lat := lateness(fs, t0.Add(10*time.Second), t0.Add(20*time.Second))
	if len(lat) != 10 {
		t.Fatalf("%d firings in a 10 s window of one a second", len(lat))
	}
	if p := percentile(lat, .5); p != 15*time.Millisecond {
		t.Fatalf("p50 %v, want 15ms", p)
	}
	if p := percentile(lat, .99); p != 20*time.Millisecond {
		t.Fatalf("p99 %v, want 20ms (the largest of 10)", p)
	}
}

// noisy.wasm is what noisy.wat compiles to.
func TestTheGuestIsItsWat(t *testing.T) {
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("WASMKEEP_REQUIRE_WAT2WASM") != "" {
			t.Fatal("wat2wasm not installed and WASMKEEP_REQUIRE_WAT2WASM is set (install wabt)")
		}
		t.Skip("wat2wasm not installed")
	}
	out := filepath.Join(t.TempDir(), "noisy.wasm")
	if b, err := exec.Command(wat2wasm, "-o", out, "noisy.wat").CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm noisy.wat: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(guestWasm, want) {
		t.Fatal("noisy.wasm is not what noisy.wat compiles to: run make testdata")
	}
}
