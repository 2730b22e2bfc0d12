package testguest_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/guestbuild"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The reminders actor (named timers and a cron digest over the one alarm)
// in each language, relative to the repository root.
const (
	remindersGo   = "guest-sdk/examples/reminders"
	remindersRust = "examples/reminders-rust"
	remindersAS   = "examples/reminders-as/assembly/index.ts"
)

func reminders(t *testing.T, lang string) []byte {
	t.Helper()
	switch lang {
	case "go":
		return testguest.Build(t, remindersGo)
	case "rust":
		return testguest.BuildRust(t, remindersRust)
	case "as":
		return testguest.BuildAS(t, remindersAS)
	}
	t.Fatalf("no reminders actor in %q", lang)
	return nil
}

var remindersLangs = []string{"go", "rust", "as"}

// TestRemindersInEveryLanguage runs one script of requests and clock steps
// against the reminders actor in each language, in the real host module
// (engine.Engine, a fake clock): the answers, the deliveries with their
// retry counts, the committed alarm and the stored timers value must be
// byte for byte the Go SDK's.
func TestRemindersInEveryLanguage(t *testing.T) {
	transcripts := map[string][]string{}
	for _, lang := range remindersLangs {
		t.Run(lang, func(t *testing.T) {
			transcripts[lang] = remindersScenario(t, reminders(t, lang))
		})
	}
	want := transcripts["go"]
	t.Logf("the Go transcript:\n%s", strings.Join(want, "\n"))
	for _, lang := range remindersLangs[1:] {
		got, ok := transcripts[lang]
		if !ok || want == nil {
			continue // skipped, or already failed
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("the %s reminders' transcript differs from the Go one's:\n%s\nwant\n%s",
				lang, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// remindersScenario runs the script and returns its transcript; it checks
// what the docs/timers.md rules say each step must give on the way.
func remindersScenario(t *testing.T, wasm []byte) []string {
	ctx := context.Background()
	t0 := time.Date(2025, 5, 1, 8, 0, 0, 0, time.UTC)
	clk := fakeclock.New(t0)
	eng, err := engine.NewEngine(ctx, engine.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	cl, err := eng.Compile(ctx, "reminders", wasm)
	if err != nil {
		t.Fatal(err)
	}
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "reminders", Name: "r"}, cl, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)

	var transcript []string
	logf := func(format string, args ...any) { transcript = append(transcript, fmt.Sprintf(format, args...)) }
	rel := func(ms int64) string { return time.UnixMilli(ms).UTC().Sub(t0).String() }
	request := func(req, want string) {
		t.Helper()
		r, err := a.Request(ctx, []byte(req))
		got := "error"
		if err == nil {
			got = string(r.Response)
		}
		logf("%q -> %q", req, got)
		if want != "" && got != want {
			t.Fatalf("request %q = %q (%v), want %q", req, got, err, want)
		}
	}
	// state records the committed alarm and failure count, and the stored
	// timers value (the format every SDK shares).
	state := func(wantAlarm time.Duration, wantFailures int) {
		t.Helper()
		s, err := a.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var v []byte
		if err := a.Lock(func(st *engine.Store) error {
			v, _, err = st.KVGet([]byte("wasmkeep.timers"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		alarm := "none"
		if s.Alarm != nil {
			alarm = rel(*s.Alarm)
		}
		logf("alarm %s failures %d timers %s", alarm, s.Failures, hex.EncodeToString(v))
		if wantAlarm >= 0 && (s.Alarm == nil || *s.Alarm != t0.Add(wantAlarm).UnixMilli()) || wantAlarm < 0 && s.Alarm != nil || s.Failures != wantFailures {
			t.Fatalf("state: alarm %s failures %d, want %v and %d", alarm, s.Failures, wantAlarm, wantFailures)
		}
	}
	// advance moves the clock to t0+d, delivering the alarm each time it
	// falls due on the way, at its time, as the host's timer would; late
	// says the actor was down meanwhile (delivered at t0+d, not on time).
	advance := func(d time.Duration, late bool) {
		t.Helper()
		target := t0.Add(d)
		if late {
			clk.Advance(target.Sub(clk.Now()))
		}
		for i := 0; ; i++ {
			s, err := a.State(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.Alarm == nil || *s.Alarm > target.UnixMilli() {
				break
			}
			if i == 100 {
				t.Fatal("100 deliveries in one advance")
			}
			clk.Advance(time.UnixMilli(*s.Alarm).Sub(clk.Now())) // to the alarm's time, if later
			dl, err := a.DeliverAlarm(ctx)
			if err != nil {
				t.Fatal(err)
			}
			logf("delivery at %s: scheduled %s retry %d failed %v", clk.Now().Sub(t0), rel(dl.Scheduled), dl.RetryCount, dl.Err != nil)
		}
		clk.Advance(target.Sub(clk.Now()))
	}
	kv := func(key string) []byte {
		t.Helper()
		var v []byte
		if err := a.Lock(func(st *engine.Store) error {
			var err error
			v, _, err = st.KVGet([]byte(key))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	putKV := func(key string, v []byte) {
		t.Helper()
		if err := a.Lock(func(st *engine.Store) error {
			return errors.Join(st.Begin(), st.KVPut([]byte(key), v), st.Commit())
		}); err != nil {
			t.Fatal(err)
		}
	}

	// on-init sets the digest (cron 09:00 UTC); two reminders and a
	// cancelled one, and requests that fail.
	request("remind tea 300 put the kettle on", "ok")
	request("remind call 60 call Ann", "ok")
	request("remind gone 120 never sent", "ok")
	request("cancel gone", "true")
	request("cancel gone", "false")
	request("remind x -1 never", "error")
	request("bogus", "error")
	request("list", "remind/call at 2025-05-01T08:01:00Z\nremind/tea at 2025-05-01T08:05:00Z\ndigest cron 2025-05-01T09:00:00Z\n")
	state(time.Minute, 0)

	// Each reminder fires at its time; the alarm moves to the next timer.
	advance(2*time.Minute, false)
	request("sent", "2025-05-01T08:01:00Z call: call Ann\n")
	state(5*time.Minute, 0)

	// Down from 08:02 to 2025-05-03 10:30: tea (due 08:05) runs late, and
	// the digest runs once for its three missed 09:00s, then moves on.
	advance(2*24*time.Hour+150*time.Minute, true)
	request("sent", "2025-05-01T08:01:00Z call: call Ann\n2025-05-01T08:05:00Z tea: put the kettle on\n")
	if got := string(kv("digests")); got != "1" {
		t.Fatalf("digests %q after the outage, want 1 (missed ticks skipped)", got)
	}
	request("list", "digest cron 2025-05-04T09:00:00Z\n")
	state(3*24*time.Hour+time.Hour, 0)

	// A timers value the SDK cannot read fails on-alarm: the host backs off
	// (1 s, 2 s), the retry count reaching the handler; restored, the retry
	// runs what is due, once.
	request("remind soon 10 tea again", "ok")
	good := kv("wasmkeep.timers")
	putKV("wasmkeep.timers", []byte("junk"))
	advance(2*24*time.Hour+150*time.Minute+12*time.Second, false)
	state(2*24*time.Hour+150*time.Minute+13*time.Second, 2)
	putKV("wasmkeep.timers", good)
	advance(2*24*time.Hour+150*time.Minute+20*time.Second, false)
	state(3*24*time.Hour+time.Hour, 0)

	// The next digest, on time.
	advance(3*24*time.Hour+time.Hour, false)
	if got := string(kv("digests")); got != "2" {
		t.Fatalf("digests %q, want 2", got)
	}
	request("sent", "2025-05-01T08:01:00Z call: call Ann\n2025-05-01T08:05:00Z tea: put the kettle on\n2025-05-03T10:30:10Z soon: tea again\n")
	state(4*24*time.Hour+time.Hour, 0)

	// The actor reads its own identity.
	request("whoami", "t/reminders/r")

	// An interval every 30 s ticks on time, three times in 95 s; down for
	// 10 minutes, it ticks once for the 20 ticks it missed and keeps its
	// phase (first + n*30 s); stopped, it ticks no more.
	d0 := 3*24*time.Hour + time.Hour
	request("every beat 30", "ok")
	request("every bad 0", "error")
	state(d0+30*time.Second, 0)
	advance(d0+95*time.Second, false)
	request("ticks beat", "3")
	advance(d0+695*time.Second, true)
	request("ticks beat", "4")
	request("list", "every/beat every 2025-05-04T09:12:00Z\ndigest cron 2025-05-05T09:00:00Z\n")
	state(d0+720*time.Second, 0)
	request("stop beat", "true")
	request("stop beat", "false")
	advance(d0+2*time.Hour, false)
	request("ticks beat", "4")
	state(4*24*time.Hour+time.Hour, 0)
	return transcript
}

// TestRustRemindersNativeTests runs the Rust reminders' own tests, natively
// against the SDK's fake host (rustc --test, no cargo).
func TestRustRemindersNativeTests(t *testing.T) {
	rustc, _, err := guestbuild.RustToolchain()
	testguest.NeedToolchain(t, err)
	root, tmp := testguest.Root(t), t.TempDir()
	rlib := filepath.Join(tmp, "libwasmkeep.rlib")
	bin := filepath.Join(tmp, "reminders-test")
	for _, args := range [][]string{
		{"--edition", "2021", "--crate-type", "rlib", "--crate-name", "wasmkeep", "-o", rlib,
			filepath.Join(root, guestbuild.RustSDK, "src", "lib.rs")},
		{"--edition", "2021", "--test", "--extern", "wasmkeep=" + rlib, "-o", bin,
			filepath.Join(root, remindersRust, "src", "lib.rs")},
	} {
		cmd := exec.Command(rustc, args...)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("rustc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("the Rust reminders' tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestASRemindersNativeTests runs the AssemblyScript reminders' own test, in
// Node against the SDK's fake host (guest-sdk-as/fake.mjs).
func TestASRemindersNativeTests(t *testing.T) {
	root := testguest.Root(t)
	node, _, err := guestbuild.ASCompiler(root)
	testguest.NeedToolchain(t, err)
	cmd := exec.Command(node, "--test", "reminders.test.mjs")
	cmd.Dir = filepath.Join(root, "examples", "reminders-as")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the AssemblyScript reminders' test failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
