package node_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/diskfault"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/node"
)

// quickCheckAll runs PRAGMA quick_check on every actor database under dir
// and returns how many it checked.
func quickCheckAll(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".db") {
			return err
		}
		n++
		conn, err := sqlite3.OpenFlags(p, sqlite3.OPEN_READWRITE)
		if err != nil {
			return err
		}
		defer conn.Close()
		st, _, err := conn.Prepare(`PRAGMA quick_check`)
		if err != nil {
			return err
		}
		defer st.Close()
		var got []string
		for st.Step() {
			got = append(got, st.ColumnText(0))
		}
		if err := st.Err(); err != nil || len(got) != 1 || got[0] != "ok" {
			t.Errorf("quick_check %s: %q, %v; want ok", filepath.Base(p), got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// When the node's data directory is full, an event (a request, an alarm
// set from outside, the first request of a new actor) is answered 507
// with a message naming the actor and the cause, and commits nothing;
// reading the committed alarm still works, and an alarm due meanwhile
// fails to deliver and stays due. Once there is space again the same
// node, not restarted, serves the same actors, the due alarm fires, and
// every actor database passes quick_check with what committed before the
// disk filled.
func TestAFullDataDirectoryAnswers507AndResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.UnixMilli(1_767_225_600_000)
	clock := fakeclock.New(t0)
	dir := t.TempDir()
	log := &ixDeliveries{}
	n := newNode(t, dir, ixClasses(t, ixClass), node.Config{
		Clock: clock, RetryAfterError: time.Second, OnDelivery: log.add,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
	})
	n.Start(ctx)
	defer n.Close(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	id := func(name string) abi.ActorID { return abi.ActorID{Tenant: "t", Class: ixClass, Name: name} }
	url := func(name string) string { return srv.URL + "/v1/actors/t/" + ixClass + "/" + name }
	exec := func(name, body string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Post(url(name)+"?kind=exec-durable", "", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out), resp.Header
	}
	ok := func(name, body string) string {
		t.Helper()
		if status, out, _ := exec(name, body); status != http.StatusOK {
			t.Fatalf("%s %q: %d %q", name, body, status, out)
		} else {
			return out
		}
		return ""
	}
	full := func(what string, status int, body string, h http.Header, name string) {
		t.Helper()
		if status != http.StatusInsufficientStorage || !strings.Contains(body, "actor "+id(name).String()+": ") || !strings.Contains(body, "no space left on device") {
			t.Fatalf("%s on a full disk: %d %q; want 507 naming the actor %s and the cause", what, status, body, id(name))
		}
		if h.Get("Retry-After") != "" {
			t.Errorf("%s on a full disk: Retry-After %q; a full disk does not clear by itself", what, h.Get("Retry-After"))
		}
	}
	due := t0.Add(time.Second).UnixMilli()
	later := t0.Add(time.Hour).UnixMilli()
	ok("a", "put k committed")
	ok("a", "set "+strconv.FormatInt(due, 10))
	ok("b", "set "+strconv.FormatInt(later, 10))

	disk := diskfault.Limit(dir, 0)
	defer disk.Release()
	status, body, h := exec("a", "put k "+strings.Repeat("x", 10000))
	full("a request", status, body, h, "a")
	status, body, h = exec("new", "put k v")
	full("a new actor's first request", status, body, h, "new")
	status, body = call(t, http.MethodPut, url("b")+"/alarm", []byte(`{"at_ms": `+strconv.FormatInt(due, 10)+`}`))
	full("setting an alarm", status, body, http.Header{}, "b")
	if status, body := call(t, http.MethodGet, url("a")+"/alarm", nil); status != http.StatusOK || !strings.Contains(body, `"alarm_ms":`+strconv.FormatInt(due, 10)) {
		t.Fatalf("reading the alarm on a full disk: %d %q; want the committed alarm", status, body)
	}
	if got := ok("a", "getkv k"); got != "committed" {
		t.Fatalf("a read on a full disk: k = %.20q, want what committed before", got)
	}
	clock.Advance(time.Second)
	log.wait(t, id("a"), "a delivery failing on the full disk", func(ev node.DeliveryEvent) bool {
		return errors.Is(ev.Err, syscall.ENOSPC)
	})
	if disk.Refused() == 0 {
		t.Fatal("no write was refused: the disk was never full")
	}

	disk.Unlimited()
	log.wait(t, id("a"), "the delivery once there is space", func(ev node.DeliveryEvent) bool {
		clock.Advance(100 * time.Millisecond) // the retry after the host-side failure
		return ev.Err == nil && ev.Event.Ran && ev.Event.Scheduled == due
	})
	ok("new", "put k v")
	if got := ok("a", "getkv log"); got != strconv.FormatInt(due, 10)+":0" {
		t.Fatalf("a's on-alarm log %q; want the one run, a first attempt", got)
	}
	if got := ok("a", "getkv k"); got != "committed" {
		t.Fatalf("k = %.20q after the full disk, want what committed before", got)
	}
	if status, body := call(t, http.MethodGet, url("b")+"/alarm", nil); status != http.StatusOK || !strings.Contains(body, `"alarm_ms":`+strconv.FormatInt(later, 10)) {
		t.Fatalf("b's alarm after the full disk: %d %q; want the one committed before", status, body)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := quickCheckAll(t, dir); got != 3 {
		t.Errorf("quick_check ran on %d databases, want the three actors'", got)
	}
}
