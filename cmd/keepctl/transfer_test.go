package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// keepctl nodes, alarms export and alarms import against a real node on
// versitygw: nodes shows the node's lease, address and state (and a
// lapsed or unreadable lease as such); export writes one JSON line per
// committed alarm the filter keeps, a name that is not UTF-8 in hex;
// import of those lines after the alarms were cleared sets them again,
// after which verify passes; a bad line is refused with its number and
// nothing is set; an actor that does not exist is skipped.
func TestKeepctlNodesExportImportOnVersitygw(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Logger: hclog.NewNullLogger(),
		Cluster: &node.ClusterConfig{Bucket: srv.Bucket, NodeID: "n1", Addr: ln.Addr().String(),
			LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second, IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	hs := &http.Server{Handler: n.Handler()}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	open := func(context.Context, string) (bucket.Bucket, error) { return srv.NewClient(t), nil }
	keepctl := func(want int, stdin string, args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		all := append([]string{"-bucket", srv.Name, "-node", "http://" + ln.Addr().String()}, args...)
		old := os.Stdin
		if stdin != "" {
			f := filepath.Join(t.TempDir(), "stdin")
			if err := os.WriteFile(f, []byte(stdin), 0o600); err != nil {
				t.Fatal(err)
			}
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			os.Stdin = fh
			defer func() { os.Stdin = old }()
		}
		if got := run(ctx, all, &out, &errOut, open); got != want {
			t.Fatalf("keepctl %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, want, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}

	// nodes: n1 live; a lease written long ago lapsed; garbage unreadable.
	if _, err := srv.Bucket.Put(ctx, "cluster/nodes/old", []byte(`{"node_id":"old","addr":"10.0.0.9:7601","ttl_ms":10000,"renewed_ms":1000,"seq":3,"instance":"x","classes":["oneshot"]}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Bucket.Put(ctx, "cluster/nodes/junk", []byte("not json"), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	out, _ := keepctl(0, "", "nodes")
	t.Logf("keepctl nodes:\n%s", out)
	if !strings.Contains(out, "n1  ") || !strings.Contains(out, ln.Addr().String()) || !strings.Contains(out, "old  ") || !strings.Contains(out, "lapsed") ||
		!strings.Contains(out, "unreadable") || !strings.Contains(out, "3 node leases, 1 live") {
		t.Fatalf("nodes:\n%s", out)
	}
	var leases []nodeLease
	out, _ = keepctl(0, "", "nodes", "-o", "json")
	if err := json.Unmarshal([]byte(out), &leases); err != nil || len(leases) != 3 {
		t.Fatalf("nodes -o json: %v\n%s", err, out)
	}
	for _, l := range leases {
		// n1 serves oneshot: its lease names it, or (null) every class;
		// and n1's build, where old's names none.
		if l.NodeID == "n1" && (!l.Live || l.Addr != ln.Addr().String() || l.TTLms != 3000 || l.Classes != nil && !slices.Equal(l.Classes, []string{"oneshot"}) || l.Version == "") ||
			l.NodeID == "old" && (l.Live || !slices.Equal(l.Classes, []string{"oneshot"}) || l.Version != "") {
			t.Errorf("nodes -o json: %+v", l)
		}
	}
	srv.Bucket.Delete(ctx, "cluster/nodes/old")
	srv.Bucket.Delete(ctx, "cluster/nodes/junk")

	// Three actors with alarms, one of them with a name that is not UTF-8.
	base := time.Now().Add(24 * time.Hour).UnixMilli()
	names := []string{"a", "b/with a slash", "\xff\xfe"}
	for i, name := range names {
		if _, err := n.Exec(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: name}, binary.LittleEndian.AppendUint64(nil, uint64(base+int64(i)*3_600_000)), node.ExecDurable); err != nil {
			t.Fatal(err)
		}
	}
	export, errOut := keepctl(0, "", "alarms", "export", "-o", "json")
	t.Logf("keepctl alarms export:\n%s%s", export, errOut)
	var lines []exported
	for sc := bufio.NewScanner(strings.NewReader(export)); sc.Scan(); {
		var e exported
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != 3 || !strings.Contains(errOut, "3 alarms") {
		t.Fatalf("export: %d lines, want 3\n%s", len(lines), export)
	}
	for _, e := range lines {
		id, err := e.actor()
		at, terr := e.at()
		if err != nil || terr != nil {
			t.Fatalf("export line %+v: %v %v", e, err, terr)
		}
		i := strings.Index(strings.Join(names, "|"), id.Name)
		if i < 0 || (id.Name == "\xff\xfe") != (e.NameHex == "fffe") || at < base {
			t.Errorf("export line %+v", e)
		}
	}
	if out, _ := keepctl(0, "", "alarms", "export", "-due-before", time.UnixMilli(base+3_600_000).UTC().Format(time.RFC3339Nano)); strings.Count(out, "\n") != 2 {
		t.Fatalf("export -due-before: want 2 lines\n%s", out)
	}

	// Clear them all, then import the export.
	var del deleteReport
	out, _ = keepctl(0, "", "alarms", "delete", "-o", "json")
	if err := json.Unmarshal([]byte(out), &del); err != nil || del.Cleared != 3 || len(del.Actors) != 3 || del.Actors[0].Result != "cleared" {
		t.Fatalf("alarms delete -o json: %+v, %v\n%s", del, err, out)
	}
	alarmOf := func(name string) *int64 {
		t.Helper()
		p, err := n.Peek(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if p.State.Alarm == nil {
			return nil
		}
		return p.State.Alarm
	}
	// A bad line: nothing is set, and the error names the line.
	bad := export + `{"tenant":"T","class":"oneshot","name":"x","alarm_ms":5}` + "\n" + `{"tenant":"t","class":"oneshot","name":"y"}` + "\n"
	_, errOut = keepctl(2, bad, "alarms", "import")
	if !strings.Contains(errOut, "line 4: ") || !strings.Contains(errOut, `"T"`) || !strings.Contains(errOut, "line 5: actor t/oneshot/y: no time") || !strings.Contains(errOut, "nothing imported") {
		t.Fatalf("import of bad lines: %s", errOut)
	}
	if _, errOut = keepctl(2, export+export, "alarms", "import"); !strings.Contains(errOut, "line 4: actor ") || !strings.Contains(errOut, "also on line 1") {
		t.Fatalf("import of an actor twice: %s", errOut)
	}
	if out, _ := keepctl(0, export, "alarms", "import", "-dry-run"); !strings.Contains(out, "3 would be set") {
		t.Fatalf("import -dry-run:\n%s", out)
	}
	for _, name := range names {
		if at := alarmOf(name); at != nil {
			t.Fatalf("actor %q has an alarm at %d after the refused imports and the dry run", name, *at)
		}
	}
	file := filepath.Join(t.TempDir(), "alarms.jsonl")
	withStranger := export + `{"tenant":"t","class":"oneshot","name":"stranger","alarm":"2030-01-01T00:00:00Z"}` + "\n"
	if err := os.WriteFile(file, []byte(withStranger), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = keepctl(0, "", "alarms", "import", "-f", file)
	t.Logf("keepctl alarms import:\n%s", out)
	if !strings.Contains(out, "4 alarms read, 3 set, 1 skipped, 0 failed") || !strings.Contains(out, "skip t/oneshot/stranger (line 4)") {
		t.Fatalf("import:\n%s", out)
	}
	for _, e := range lines {
		id, _ := e.actor()
		want, _ := e.at()
		if at := alarmOf(id.Name); at == nil || *at != want {
			t.Errorf("after the import, actor %s: alarm %v, want %d", id, at, want)
		}
	}
	var rep map[string]any
	if out, _ := keepctl(0, "", "backfill", "-o", "json"); json.Unmarshal([]byte(out), &rep) != nil || rep["Alarms"] != 3.0 {
		t.Fatalf("backfill -o json after the import:\n%s", out)
	}
	n.FlushDeletes(ctx)
	if out, _ := keepctl(0, "", "verify"); !strings.Contains(out, "missing 0") || !strings.Contains(out, "extra 0") {
		t.Fatalf("verify after the import:\n%s", out)
	}
}
