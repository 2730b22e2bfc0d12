package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	s3bucket "github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/faultproxy"
)

// The soak's count of duplicates sees a run whose commit died with its
// node: node a runs an alarm (the guest says so) while its uploads hang at
// its fault proxy, and is SIGKILLed; node b, which shares the bucket, runs
// the alarm again once a's hold has lapsed. The soak's log reader and
// checker count one duplicate, caused by the kill. (The nodes log "alarm
// fired" only after a run replicated: without the guest's line the first
// run would not be seen.)
func TestASIGKILLMidFiringIsCountedAsADuplicate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts keepnode processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	name := "wasmkeep-soak-kill-" + hex.EncodeToString(suffix[:])
	var s3 clusterproc.S3
	var direct []s3bucket.Option
	if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
		s3 = clusterproc.S3{Endpoint: ep, Bucket: name}
	} else {
		gw, err := clusterproc.StartVersitygw(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer gw.Stop()
		s3 = gw.S3(name)
		direct = append(direct, s3bucket.WithEndpoint(gw.Endpoint), s3bucket.WithCredentials(gw.AccessKey, gw.SecretKey), s3bucket.WithRegion(s3bucket.DefaultRegion))
	}
	b, err := s3bucket.New(ctx, name, direct...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}

	o := defaults()
	o.out = &logWriter{t: t}
	s := &soak{o: o, start: time.Now(), byName: map[string]*actor{}, runs: map[string]int{}, said: map[string]int{}}
	id := abi.ActorID{Tenant: "soak", Class: "soak", Name: "k"}
	a := &actor{id: id, plan: plan{Name: id.String(), Kind: "oneshot"}, expect: -1}
	s.actors, s.byName[id.String()] = []*actor{a}, a
	root, err := clusterproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := clusterproc.Config{
		Binary: bin, S3: s3, Dir: dir, Log: s, ReadyTimeout: time.Minute,
		Classes: map[string]string{"soak": filepath.Join(root, "examples", "soak-actor", "soak_actor.wasm")},
		// A lease long enough that a's stays valid, with its renewals held,
		// past the alarm's time (validity runs to the last renewal that
		// came back plus TTL - margin).
		Flags: []string{"-lease-ttl", "10s", "-lease-margin", "1s", "-lease-grace", "2s", "-sweep", "1s",
			"-tenants", "soak", "-idle", "10m", "-log-json", "-log-level", "debug"},
	}
	nodes := map[string]*clusterproc.Node{}
	proxies := map[string]*faultproxy.Proxy{}
	for i, n := range []string{"a", "b"} {
		p, err := faultproxy.Start(s3.Endpoint, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		c := cfg
		c.S3.Endpoint = p.URL
		nd, err := clusterproc.StartNode(ctx, c, n, "-node-id", n)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = nd.Kill() }()
		nodes[n], proxies[n] = nd, p
	}

	// Arm the alarm on a, two seconds on; then hold every PUT a sends
	// (its upload after the run, its lease renewals) for a minute.
	due := time.Now().Add(2 * time.Second).UnixMilli()
	if _, err := nodes["a"].Client().ExecDurable(ctx, id, request(1, due, 1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	proxies["a"].SetDelay("PUT", time.Minute)
	runs := func() []guestRun {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]guestRun(nil), a.runs...)
	}
	wait := func(what string, cond func([]guestRun) bool) []guestRun {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if rs := runs(); cond(rs) {
				return rs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute; runs %v", what, runs())
			}
		}
	}
	wait("a running the alarm", func(rs []guestRun) bool { return len(rs) > 0 })
	if err := nodes["a"].Kill(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.killLog = append(s.killLog, kill{Node: "a", At: time.Now().UnixMilli()})
	kills := append([]kill(nil), s.killLog...)
	s.mu.Unlock()
	rs := wait("b running it again", func(rs []guestRun) bool { return len(rs) > 1 })

	v := check(history{Plan: a.plan, Runs: rs, PendingAtEnd: -1}, bounds{})
	if rs[0].Node != "a" || rs[1].Node != "b" || len(v.Dups) != 1 || v.Runs != 2 {
		t.Fatalf("runs %v, duplicates %v; want a run on a and one on b, one duplicate", rs, v.Dups)
	}
	if c := dupCause(v.Dups[0], evidence{Kills: kills}, id, (10 * time.Second).Milliseconds()); c != causeKill {
		t.Errorf("cause %q, want %q", c, causeKill)
	}
	if len(v.Violations) > 0 {
		t.Errorf("violations: %v", v.Violations)
	}
}
