package node_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/node"
)

// A node started on a data directory where a later build wrote one
// actor's database (a rollback; here its header's schema version set one
// above this build's) skips that actor in its start-up scan with a WARN
// naming it, serves the others, answers a request for it 503
// newer_format naming the actor and the version, counts both refusals in
// wasmkeep_newer_format_total{kind="schema"}, and leaves the database's
// files byte for byte as they were: running alone, and in a cluster
// (in-memory bucket) whose snapshot of the actor is the local file.
func TestALocalDatabaseOfANewerSchemaIsSkippedAtStartAndRefusedWith503(t *testing.T) {
	classes := oneshot(t)
	for _, mode := range []string{"alone", "cluster"} {
		t.Run(mode, func(t *testing.T) { testNewerLocalSchema(t, classes, mode == "cluster") })
	}
}

func testNewerLocalSchema(t *testing.T, classes map[string][]byte, clustered bool) {
	ctx := context.Background()
	dir := t.TempDir()
	b := bucket.NewMem()
	start := func(reg prometheus.Registerer, log io.Writer) *node.Node {
		t.Helper()
		cfg := node.Config{DataDir: dir, Classes: classes, Registerer: reg,
			Logger: hclog.New(&hclog.LoggerOptions{Name: "n", Level: hclog.Warn, Output: io.MultiWriter(testWriter{t}, log)})}
		if clustered {
			cfg.Cluster = &node.ClusterConfig{Bucket: b, NodeID: "a", Addr: "a.invalid:1", IdleTimeout: time.Hour, SweepPeriod: time.Hour}
		}
		n, err := node.New(ctx, cfg)
		if err != nil {
			t.Fatalf("starting the node: %v", err)
		}
		return n
	}
	later := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "later"}
	control := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "control"}
	first := start(nil, io.Discard)
	for _, id := range []abi.ActorID{later, control} {
		if _, err := first.Request(ctx, id, hourAhead()); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A later build's schema version in the database's header.
	p := node.Path(dir, later)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], format.SchemaVersion+1)
	if _, err := f.WriteAt(v[:], 60); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// The files of the later actor's database: the file, its WAL and
	// sidecar, whatever lies beside it under its name.
	files := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		matches, err := filepath.Glob(p + "*")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			body, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(m)] = string(body)
		}
		return out
	}
	before := files()

	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	n := start(reg, logs)
	defer n.Close(ctx)
	if _, ok := n.Timer().Get(alarms.TimerKey(control)); !ok {
		t.Fatal("the start-up scan did not arm the control actor's alarm")
	}
	if at, ok := n.Timer().Get(alarms.TimerKey(later)); ok {
		t.Fatalf("the start-up scan read the alarm of a later schema's database: %d", at)
	}
	if l := logs.String(); !strings.Contains(l, "[WARN]") || !strings.Contains(l, "skipped by the start-up scan") ||
		!strings.Contains(l, "actor="+later.String()) || !strings.Contains(l, "format=2") {
		t.Fatalf("no WARN names the skipped actor %s and its format 2:\n%s", later, l)
	}
	newer := func() float64 {
		return metricstest.Gather(reg).Value("wasmkeep_newer_format_total", "kind", "schema")
	}
	if got := newer(); got != 1 {
		t.Fatalf("wasmkeep_newer_format_total{kind=\"schema\"} = %v after the scan, want 1", got)
	}

	hs := httptest.NewServer(n.Handler())
	defer hs.Close()
	c := clusterproc.ClientOf(hs.URL)
	var pr *client.Problem
	_, err = c.Exec(ctx, later, hourAhead())
	if !errors.As(err, &pr) || pr.Status != 503 || pr.Code != client.CodeNewerFormat || pr.RetryAfter != cluster.DefaultTTL ||
		!strings.Contains(pr.Detail, later.String()) || !strings.Contains(pr.Detail, "schema format version 2") {
		t.Fatalf("a request for %s: %v; want 503 %s with Retry-After %v naming the actor and its schema version", later, err, client.CodeNewerFormat, cluster.DefaultTTL)
	}
	if got := newer(); got != 2 {
		t.Fatalf("wasmkeep_newer_format_total{kind=\"schema\"} = %v after a refused request, want 2", got)
	}
	if _, err := c.Exec(ctx, control, hourAhead()); err != nil {
		t.Fatalf("a request for the control actor: %v", err)
	}
	if after := files(); !maps.Equal(after, before) {
		t.Fatalf("the later schema's database changed: files %v before, %v after", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}
