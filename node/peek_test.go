package node_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// Reading an actor's alarm over HTTP creates nothing and takes no hold: an
// actor that does not exist reads as no alarm and stays nonexistent (no
// ownership record, no state); a held actor is answered by its holder,
// whichever node is asked; an actor nobody holds is read from the bucket,
// and its ownership record is left as it was.
func TestReadingAnAlarmCreatesNothingAndTakesNoHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := s3test.Start(t).Bucket
	classes := counter(t)
	a := serveHost(t, b, "a", classes, hostConfig{})
	bn := serveHost(t, b, "b", classes, hostConfig{})
	objects := func() []string {
		t.Helper()
		keys, err := b.List(ctx, "cluster/", "", 100_000)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range keys {
			if k[len("cluster/"):len("cluster/")+6] != "nodes/" {
				out = append(out, k)
			}
		}
		return out
	}

	ghost := abi.ActorID{Tenant: "t", Class: "counter", Name: "never"}
	for _, n := range []*served{a, bn} {
		st, err := clusterproc.ClientOf(n.URL).Alarm(ctx, ghost)
		if err != nil {
			t.Fatal(err)
		}
		if got := objects(); len(got) != 0 {
			t.Fatalf("reading an alarm through %s created %v", n.URL, got)
		}
		if st.AlarmMs != nil || st.From != "none" {
			t.Fatalf("alarm of an actor that never existed, through %s: %+v, want none", n.URL, st)
		}
	}

	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "x"}
	out, err := clusterproc.ClientOf(a.URL).ExecDurable(ctx, id, []byte("start 3600000"))
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	if err := json.Unmarshal(out, &c); err != nil || c.AlarmMs == nil {
		t.Fatalf("start: %s (%v)", out, err)
	}
	st, err := clusterproc.ClientOf(bn.URL).Alarm(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "a" || st.From != "holder" || st.AlarmMs == nil || *st.AlarmMs != *c.AlarmMs {
		t.Fatalf("alarm through b while a holds the actor: %+v, want a's answer from its database", st)
	}

	// a shuts down cleanly: the actor is released, nobody holds it.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	holdKey := "cluster/holds/t/counter/78"
	rec0, _, err := b.Get(ctx, holdKey)
	if err != nil {
		t.Fatal(err)
	}
	st, err = clusterproc.ClientOf(bn.URL).Alarm(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "b" || st.From != "bucket" || st.AlarmMs == nil || *st.AlarmMs != *c.AlarmMs {
		t.Fatalf("alarm through b with no holder: %+v, want it read from the bucket", st)
	}
	if rec1, _, err := b.Get(ctx, holdKey); err != nil || string(rec1) != string(rec0) {
		t.Fatalf("the ownership record changed from %s to %s (%v): the read took a hold", rec0, rec1, err)
	}
}
