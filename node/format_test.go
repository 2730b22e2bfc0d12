package node_test

// A node meeting records of a later format in the bucket (a rolling
// upgrade, or a rollback: docs/design.md#format-versions), on versitygw:
// a request for the actor is answered 503 newer_format with Retry-After,
// counted and logged with the version, and the record is left as it is;
// a sweep skips an index entry of a later format, and the delivery of an
// entry whose actor's snapshot is of a later format refuses it and leaves
// the entry, while it removes what it may.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/statetest"
)

func TestARecordOfANewerFormatIsRefusedWith503AndLeftAsItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := s3test.Start(t)
	b := srv.Bucket
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	a := serveHost(t, b, "a", oneshot(t), hostConfig{start: true, registerer: reg, log: logs})
	c := clusterproc.ClientOf(a.URL)
	actor := func(name string) abi.ActorID { return abi.ActorID{Tenant: "t", Class: "oneshot", Name: name} }
	newer := func(kind string) float64 {
		return metricstest.Gather(reg).Value("wasmkeep_newer_format_total", "kind", kind)
	}
	object := func(key string) []byte {
		t.Helper()
		body, _, err := b.Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return body
	}

	// A snapshot this build wrote, for the planted ones to start from.
	control := actor("control")
	if _, err := c.ExecDurable(ctx, control, hourAhead()); err != nil {
		t.Fatal(err)
	}
	good, _, err := cluster.NewReplica(b, "cluster/").Download(ctx, control, latest(t, b, control))
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.BigEndian.Uint32(good[60:]); v != 1 {
		t.Fatalf("the node uploads schema version %d, want 1", v)
	}
	schema2 := bytes.Clone(good)
	binary.BigEndian.PutUint32(schema2[60:], 2)

	// Each request is refused retryably, naming the actor and the version,
	// and the record stays as it was.
	holdKey := cluster.HoldKey("", actor("hold"))
	holdRecord := []byte(`{"format":2,"node_id":"","generation":5,"state":"none"}`)
	if _, err := b.Put(ctx, holdKey, holdRecord, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	// Held by a node whose lease is of a later format: not judged live or
	// expired, so neither forwarded to nor taken over.
	if _, err := b.Put(ctx, "cluster/nodes/later", []byte(`{"format":2,"node_id":"later","addr":"127.0.0.1:1","ttl_ms":1000,"seq":1,"instance":"i"}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	heldKey := cluster.HoldKey("", actor("held"))
	if _, err := b.Put(ctx, heldKey, []byte(`{"format":1,"node_id":"later","generation":3,"addr":"127.0.0.1:1","instance":"i","state":"none"}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	snapKey := statetest.Plant(t, b, "cluster/", actor("schema"), 1, schema2)
	boxKey := statetest.Plant(t, b, "cluster/", actor("container"), 1, append([]byte("wasmkeep-snapshot/2\n"), good...))
	for _, r := range []struct {
		name, kind, key string
		says            string
	}{
		{"hold", "hold", holdKey, "hold format version 2"},
		{"held", "lease", heldKey, "lease format version 2"},
		{"schema", "schema", snapKey, "schema format version 2"},
		{"container", "snapshot", boxKey, "snapshot format version 2"},
	} {
		id := actor(r.name)
		before := object(r.key)
		_, err := c.Exec(ctx, id, hourAhead())
		var p *client.Problem
		if !errors.As(err, &p) || p.Status != 503 || p.Code != client.CodeNewerFormat || p.RetryAfter != cluster.DefaultTTL ||
			!strings.Contains(p.Detail, id.String()) || !strings.Contains(p.Detail, r.says) {
			t.Fatalf("a request for %s: %v, want 503 %s with Retry-After %v naming the actor and %q", id, err, client.CodeNewerFormat, cluster.DefaultTTL, r.says)
		}
		if !bytes.Equal(object(r.key), before) {
			t.Fatalf("the %s of %s changed after the refusal", r.kind, id)
		}
		// (The lease is read by the node's readings of the leases too.)
		if got := newer(r.kind); got != 1 && (r.kind != "lease" || got < 1) {
			t.Fatalf("wasmkeep_newer_format_total{kind=%q} = %v after one refusal, want 1", r.kind, got)
		}
		if !strings.Contains(logs.String(), id.String()) || !strings.Contains(logs.String(), "format=2") {
			t.Fatalf("no log line names %s and format 2:\n%s", id, logs.String())
		}
	}
	if _, err := c.Exec(ctx, control, hourAhead()); err != nil {
		t.Fatalf("the control actor after the refusals: %v", err)
	}

	// Dead-letter records: one written before versions is listed; one of
	// a later format is not read, left as it is, and a redrive of it
	// refused the same way.
	letter := func(id abi.ActorID) string { return "cluster/dead-letters/" + id.Path() }
	oldLetter := []byte(`{"tenant":"t","class":"oneshot","name":"old-letter","scheduled_ms":1,"scheduled":"1970-01-01T00:00:00.001Z","attempts":3,"error":"boom","failed_ms":2,"failed":"1970-01-01T00:00:00.002Z"}`)
	laterLetter := []byte(`{"format":2,"tenant":"t","class":"oneshot","name":"later-letter","attempts":"all of them"}`)
	if _, err := b.Put(ctx, letter(actor("old-letter")), oldLetter, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, letter(actor("later-letter")), laterLetter, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	page, err := c.DeadLetters(ctx, "t", client.ListOptions{})
	if err != nil || len(page.DeadLetters) != 1 || page.DeadLetters[0].Name != "old-letter" || page.DeadLetters[0].Attempts != 3 {
		t.Fatalf("the tenant's dead letters: %+v (%v), want the record without a format alone", page, err)
	}
	var p *client.Problem
	if _, err := c.RedriveDeadLetters(ctx, "t", client.DeadLetterSelect{Class: "oneshot", Name: "later-letter", DryRun: true}); !errors.As(err, &p) ||
		p.Status != 503 || p.Code != client.CodeNewerFormat || p.RetryAfter != cluster.DefaultTTL || !strings.Contains(p.Detail, "dead_letter format version 2") {
		t.Fatalf("a redrive of a dead letter of a later format: %v, want 503 %s", err, client.CodeNewerFormat)
	}
	if !bytes.Equal(object(letter(actor("later-letter"))), laterLetter) {
		t.Fatal("the dead-letter record of a later format changed")
	}
	if got := newer("dead_letter"); got != 2 {
		t.Fatalf("wasmkeep_newer_format_total{kind=\"dead_letter\"} = %v after a listing and a redrive, want 2", got)
	}

	// The sweep: an index entry of a later format, overdue, stays and is
	// counted; so does the entry of the actor whose snapshot is of a later
	// format (its delivery refuses the snapshot); a stale entry of the
	// control actor, at another time than its alarm, is removed.
	overdue := time.Now().Add(-time.Hour).UnixMilli()
	laterEntry := "cluster/" + alarmindex.TimePrefix("t", overdue) + "oneshot.v2/whatever-comes-next"
	schemaEntry := "cluster/" + alarmindex.Key{Actor: actor("schema"), DueMs: overdue, Tag: alarmindex.Tag{Generation: 1, Nonce: "0a"}}.String()
	staleEntry := "cluster/" + alarmindex.Key{Actor: control, DueMs: overdue, Tag: alarmindex.Tag{Generation: 1, Nonce: "0b"}}.String()
	for _, k := range []string{laterEntry, schemaEntry, staleEntry} {
		if _, err := b.Put(ctx, k, nil, bucket.Cond{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	a.Plugin().Sweep(ctx)
	waitFor(t, "the stale entry of the control actor removed", func() bool {
		_, _, err := b.Get(ctx, staleEntry)
		return errors.Is(err, bucket.ErrNotFound)
	})
	waitFor(t, "the delivery of the entry of an actor whose schema is newer refused", func() bool { return newer("schema") >= 2 })
	if got := newer("index_entry"); got != 1 {
		t.Fatalf("wasmkeep_newer_format_total{kind=\"index_entry\"} = %v after one sweep, want 1", got)
	}
	if !strings.Contains(logs.String(), laterEntry[len("cluster/"):]) {
		t.Fatalf("no log line names the skipped entry:\n%s", logs.String())
	}
	a.FlushDeletes(ctx)
	for what, k := range map[string]string{"the entry of a later format": laterEntry, "the entry of the actor whose schema is newer": schemaEntry} {
		if _, _, err := b.Get(ctx, k); err != nil {
			t.Fatalf("%s is gone after the sweep: %v", what, err)
		}
	}
	if !bytes.Equal(object(snapKey), schema2) {
		t.Fatal("the snapshot of a later schema changed after its delivery")
	}
}
