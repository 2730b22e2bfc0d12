package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// callJSON sends one call with a token ("" for none) and decodes a 200's
// JSON into out; it returns the status and what the answer said.
func callJSON(t *testing.T, method, u, token, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && out != nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(out); err != nil {
			t.Fatalf("%s %s: %q: %v", method, u, b, err)
		}
	}
	return resp.StatusCode, said(t, resp.Header, b)
}

// deadLetters lists tenant t's dead letters through n.
func deadLetters(t *testing.T, base, token, query string) node.DeadLetterList {
	t.Helper()
	var l node.DeadLetterList
	if status, said := callJSON(t, "GET", base+"/v1/tenants/t/dead-letters"+query, token, "", &l); status != 200 {
		t.Fatalf("GET dead-letters%s: %d %s", query, status, said)
	}
	return l
}

func letterNames(l []node.DeadLetter) string {
	var s []string
	for _, d := range l {
		s = append(s, d.Class+"/"+d.Name)
	}
	return strings.Join(s, ",")
}

// request runs a request event through the API (any node: forwarded to
// the holder) and returns the guest's response.
func request(t *testing.T, base string, id abi.ActorID, body string) string {
	t.Helper()
	status, said := callJSON(t, "POST", base+"/v1/actors/"+id.Tenant+"/"+id.Class+"/"+id.Name+"?kind=exec-durable", "", body, nil)
	if status != 200 {
		t.Fatalf("request %q to %s: %d %s", body, id, status, said)
	}
	return said
}

// giveUp makes each actor's on-alarm fail its only attempt (the class
// allows one) and waits for its dead letter to be listed.
func giveUp(t *testing.T, base string, ids ...abi.ActorID) (scheduled int64) {
	t.Helper()
	scheduled = time.Now().UnixMilli()
	for _, id := range ids {
		request(t, base, id, "mode fail")
		request(t, base, id, "set "+strconv.FormatInt(scheduled, 10))
	}
	waitFor(t, "the dead letters to be listed", func() bool { return len(deadLetters(t, base, "", "").DeadLetters) == len(ids) })
	return scheduled
}

// An actor whose on-alarm fails its last attempt is listed with its dead
// letter, and GET …/alarm says so; a dry run of a redrive reports it and
// changes nothing; a redrive runs on-alarm again, retry count 0, and it is
// no longer listed; an acknowledgement removes one without running
// anything; a second one finds nothing (404). Pages of one follow the
// cursor.
func TestDeadLettersAreListedRedrivenAndAcknowledged(t *testing.T) {
	t.Parallel()
	classes := map[string][]byte{"scripted": testguest.Build(t, "testdata/guests/scripted")}
	mem := bucket.NewMem()
	a := serveHost(t, mem, "a", classes, hostConfig{start: true,
		engine: []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)}})
	p1 := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p1"}
	p2 := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p2"}
	scheduled := giveUp(t, a.URL, p1, p2)
	checkLetters(t, a.URL, scheduled, p1, p2)
	// The record in the bucket says its format, 1 (docs/design.md#format-versions).
	if rec, _, ok := mem.Object("cluster/dead-letters/" + p1.Path()); !ok || !strings.HasPrefix(string(rec), `{"format":1,`) {
		t.Fatalf("p1's dead-letter record: %s (%v), want one at format 1", rec, ok)
	}

	// A dry run reports and changes nothing.
	var out node.DeadLetterOutcome
	if status, said := callJSON(t, "POST", a.URL+"/v1/tenants/t/dead-letters:redrive", "", `{"all": true, "dry_run": true}`, &out); status != 200 {
		t.Fatalf("dry run: %d %s", status, said)
	}
	if !out.DryRun || out.Matched != 2 || out.Done != 2 || out.Actors[0].Result != "would_redrive" || out.Actors[0].Name != "p1" {
		t.Fatalf("dry run: %+v; want both would_redrive", out)
	}
	if got := deadLetters(t, a.URL, "", ""); len(got.DeadLetters) != 2 {
		t.Fatalf("after a dry run: %s; want both still listed", letterNames(got.DeadLetters))
	}
	if log := request(t, a.URL, p1, "getkv log"); log != "none" {
		t.Fatalf("after a dry run, p1's successful runs: %q, want none", log)
	}

	// The guest is fixed, then redriven: on-alarm runs again with retry
	// count 0 and succeeds.
	request(t, a.URL, p1, "mode ok")
	if status, said := callJSON(t, "POST", a.URL+"/v1/tenants/t/dead-letters:redrive", "", `{"class": "scripted", "name": "p1"}`, &out); status != 200 {
		t.Fatalf("redrive p1: %d %s", status, said)
	}
	if out.DryRun || out.Matched != 1 || out.Done != 1 || out.Actors[0].Result != "redriven" || out.Actors[0].AlarmMs == nil {
		t.Fatalf("redrive p1: %+v", out)
	}
	at := *out.Actors[0].AlarmMs
	waitFor(t, "p1's redriven alarm to run", func() bool { return request(t, a.URL, p1, "getkv log") != "none" })
	if log := request(t, a.URL, p1, "getkv log"); log != fmt.Sprintf("%d:0", at) {
		t.Fatalf("p1's successful runs after the redrive: %q, want %d:0", log, at)
	}
	if got := deadLetters(t, a.URL, "", ""); letterNames(got.DeadLetters) != "scripted/p2" {
		t.Fatalf("after redriving p1: %s; want p2 alone", letterNames(got.DeadLetters))
	}

	// Acknowledged: gone, and nothing ran.
	if status, said := callJSON(t, "POST", a.URL+"/v1/tenants/t/dead-letters:acknowledge", "", `{"class": "scripted"}`, &out); status != 200 {
		t.Fatalf("acknowledge: %d %s", status, said)
	}
	if out.Matched != 1 || out.Done != 1 || out.Actors[0].Result != "acknowledged" || out.Actors[0].Name != "p2" {
		t.Fatalf("acknowledge: %+v", out)
	}
	if got := deadLetters(t, a.URL, "", ""); len(got.DeadLetters) != 0 {
		t.Fatalf("after the acknowledgement: %s; want none", letterNames(got.DeadLetters))
	}
	var st node.AlarmState
	if status, said := callJSON(t, "GET", a.URL+"/v1/actors/t/scripted/p2/alarm", "", "", &st); status != 200 || st.AlarmMs != nil || st.DeadLetter != nil {
		t.Fatalf("p2 after the acknowledgement: %d %s %+v; want no alarm and no dead letter", status, said, st)
	}
	if calls := request(t, a.URL, p2, "calls"); calls != "1" {
		t.Fatalf("p2's on-alarm ran %s times, want 1 (the failed run): an acknowledgement runs nothing", calls)
	}
	status, said := callJSON(t, "POST", a.URL+"/v1/tenants/t/dead-letters:acknowledge", "", `{"class": "scripted", "name": "p2"}`, nil)
	if status != 404 || !strings.Contains(said, "t/scripted/p2") {
		t.Fatalf("a second acknowledgement: %d %s; want 404 naming the actor", status, said)
	}
}

// An acknowledgement deletes a dead letter's record only while it holds
// the dead letter the acknowledgement read: the record's key is the
// actor's, so when the actor's alarm is set again and given up again after
// the read, the record is the newer dead letter's, which nobody saw. It
// stays listed, and the acknowledgement (of a dead letter that is no
// longer listed) says so. Sent to the actor's holder, and to a node that
// forwards it there.
func TestAnAcknowledgementDoesNotDeleteADeadLetterKeptSinceItRead(t *testing.T) {
	t.Parallel()
	classes := map[string][]byte{"scripted": testguest.Build(t, "testdata/guests/scripted")}
	p1 := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p1"}
	letter := "cluster/dead-letters/" + p1.Path()
	for _, via := range []string{"holder", "another node"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			mem := bucket.NewMem()
			eng := []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)}
			// The node acknowledging reads the record through reads.
			reads := &heldRead{Mem: mem, key: letter}
			var onA bucket.Bucket = mem
			if via == "holder" {
				onA = reads
			}
			a := serveHost(t, onA, "a", classes, hostConfig{start: true, engine: eng})
			acker := a
			if via != "holder" {
				acker = serveHost(t, reads, "b", classes, hostConfig{engine: eng})
			}
			first := giveUp(t, a.URL, p1) // a holds p1

			read, resume := reads.hold()
			acked := make(chan node.DeadLetterOutcome, 1)
			go func() {
				var out node.DeadLetterOutcome
				if status, said := callJSON(t, "POST", acker.URL+"/v1/tenants/t/dead-letters:acknowledge", "", `{"class": "scripted", "name": "p1"}`, &out); status != 200 {
					t.Errorf("acknowledge: %d %s", status, said)
				}
				acked <- out
			}()
			<-read
			// Meanwhile the alarm is set again and given up again: a new
			// record under the same key.
			second := time.Now().UnixMilli()
			request(t, a.URL, p1, "set "+strconv.FormatInt(second, 10))
			waitFor(t, "the second dead letter's record", func() bool {
				body, _, ok := mem.Object(letter)
				return ok && strings.Contains(string(body), `"scheduled_ms":`+strconv.FormatInt(second, 10))
			})
			close(resume)
			out := <-acked
			got := deadLetters(t, acker.URL, "", "")
			if len(got.DeadLetters) != 1 || got.DeadLetters[0].ScheduledMs != second {
				t.Fatalf("after acknowledging the dead letter scheduled at %d: listed %+v; want the one kept since, scheduled at %d", first, got.DeadLetters, second)
			}
			if out.Done != 1 || len(out.Actors) != 1 || out.Actors[0].Result != "acknowledged" || !strings.Contains(out.Actors[0].Detail, "stays listed") {
				t.Fatalf("acknowledge: %+v; want p1's acknowledged, saying that a newer dead letter stays listed", out)
			}

			// Acknowledged again, the newer one goes.
			var again node.DeadLetterOutcome
			if status, said := callJSON(t, "POST", acker.URL+"/v1/tenants/t/dead-letters:acknowledge", "", `{"class": "scripted"}`, &again); status != 200 || again.Done != 1 || again.Actors[0].Detail != "" {
				t.Fatalf("acknowledge again: %d %s %+v", status, said, again)
			}
			if got := deadLetters(t, acker.URL, "", ""); len(got.DeadLetters) != 0 {
				t.Fatalf("after the second acknowledgement: %s; want none", letterNames(got.DeadLetters))
			}
		})
	}
}

// heldRead is one node's view of the shared bucket whose next GET of key,
// once hold is called, is held after it read the object: until resume is
// closed, the node goes on as if that GET were still on its way back.
type heldRead struct {
	*bucket.Mem
	key  string
	mu   sync.Mutex
	read chan struct{} // closed once the held GET has read; nil when none is to be held
	back chan struct{}
}

// hold holds the next GET of the key; read is closed once it has read,
// and closing resume lets it return.
func (h *heldRead) hold() (read chan struct{}, resume chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.read, h.back = make(chan struct{}), make(chan struct{})
	return h.read, h.back
}

func (h *heldRead) Get(ctx context.Context, key string) ([]byte, string, error) {
	body, etag, err := h.Mem.Get(ctx, key)
	if key != h.key {
		return body, etag, err
	}
	h.mu.Lock()
	read, back := h.read, h.back
	h.read = nil
	h.mu.Unlock()
	if read != nil {
		close(read)
		<-back
	}
	return body, etag, err
}

// checkLetters checks the listed dead letters of ids (in key order), one
// page at a time, and GET …/alarm of the first.
func checkLetters(t *testing.T, base string, scheduled int64, ids ...abi.ActorID) {
	t.Helper()
	cursor := ""
	for i, id := range ids {
		page := deadLetters(t, base, "", "?class=scripted&limit=1"+cursor)
		if len(page.DeadLetters) != 1 {
			t.Fatalf("page %d: %s", i, letterNames(page.DeadLetters))
		}
		d := page.DeadLetters[0]
		if d.Tenant != id.Tenant || d.Class != id.Class || d.Name != id.Name || d.ScheduledMs != scheduled || d.Attempts != 1 ||
			!strings.Contains(d.Error, "failing on alarm") || d.FailedMs < scheduled || d.Failed == "" || d.Scheduled == "" {
			t.Fatalf("page %d: %+v; want %s's dead letter, scheduled at %d, one attempt, its error", i, d, id, scheduled)
		}
		if (page.NextCursor == "") != (i == len(ids)-1) {
			t.Fatalf("page %d of %d: next cursor %q", i, len(ids), page.NextCursor)
		}
		cursor = "&cursor=" + page.NextCursor
	}
	var st node.AlarmState
	id := ids[0]
	if status, said := callJSON(t, "GET", base+"/v1/actors/"+id.Tenant+"/"+id.Class+"/"+id.Name+"/alarm", "", "", &st); status != 200 ||
		st.AlarmMs != nil || st.DeadLetter == nil || st.DeadLetter.ScheduledMs != scheduled {
		t.Fatalf("GET alarm of %s: %d %s %+v; want no alarm and its dead letter", id, status, said, st)
	}
}

// On versitygw, with tokens: another tenant's token is refused (403) the
// tenant's lists and redrive, no token is a 401; the tenant's own token
// redrives a dead letter through a node that does not hold the actor
// (the holder sets the alarm), and the list is empty after.
func TestDeadLettersAreRedrivenThroughAnyNodeWithTheTenantsToken(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	classes := map[string][]byte{"scripted": testguest.Build(t, "testdata/guests/scripted")}
	sec := node.Security{Token: "op", PeerToken: "peer", TenantTokens: map[string]string{"t": "tt", "u": "ut"}}
	hc := hostConfig{start: true, security: sec, engine: []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)}}
	a := serveHost(t, srv.Bucket, "a", classes, hc)
	b := serveHost(t, srv.Bucket, "b", classes, hc)
	id := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p"}
	ctx := t.Context()
	now := time.Now().UnixMilli()
	for _, req := range []string{"mode fail", "set " + strconv.FormatInt(now, 10)} {
		if _, err := a.Request(ctx, id, []byte(req)); err != nil { // a holds it
			t.Fatal(err)
		}
	}
	letters := func(base, token string) (int, []node.DeadLetter) {
		var l node.DeadLetterList
		status, _ := callJSON(t, "GET", base+"/v1/tenants/t/dead-letters", token, "", &l)
		return status, l.DeadLetters
	}
	waitFor(t, "the dead letter to be listed", func() bool { _, l := letters(b.URL, "tt"); return len(l) == 1 })
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"GET", "/v1/tenants/t/dead-letters", "ut", "", 403},
		{"GET", "/v1/tenants/t/dead-letters", "", "", 401},
		{"GET", "/v1/tenants/t/alarms", "ut", "", 403},
		{"POST", "/v1/tenants/t/dead-letters:redrive", "ut", `{"all": true}`, 403},
		{"POST", "/v1/tenants/t/dead-letters:acknowledge", "ut", `{"all": true}`, 403},
		{"GET", "/v1/actors/t/scripted/p/alarm", "ut", "", 403},
	} {
		if status, said := callJSON(t, c.method, b.URL+c.path, c.token, c.body, nil); status != c.want {
			t.Errorf("%s %s with token %q: %d %s, want %d", c.method, c.path, c.token, status, said, c.want)
		}
	}
	if _, l := letters(b.URL, "tt"); len(l) != 1 {
		t.Fatalf("after the refused calls: %+v; want the dead letter still listed", l)
	}

	if _, err := a.Request(ctx, id, []byte("mode ok")); err != nil {
		t.Fatal(err)
	}
	var out node.DeadLetterOutcome
	if status, said := callJSON(t, "POST", b.URL+"/v1/tenants/t/dead-letters:redrive", "tt", `{"class": "scripted"}`, &out); status != 200 || out.Done != 1 || out.Failed != 0 {
		t.Fatalf("redrive through b: %d %s %+v", status, said, out)
	}
	waitFor(t, "the redriven alarm to run on a", func() bool {
		r, err := a.Request(ctx, id, []byte("getkv log"))
		return err == nil && string(r.Response) != "none"
	})
	if _, l := letters(b.URL, "tt"); len(l) != 0 {
		t.Fatalf("after the redrive: %+v; want none", l)
	}
}

// A dead letter is listed until the actor's alarm is set again or the
// actor is deleted (docs/http-api.md#a-tenants-alarms-and-dead-letters),
// each call sent to a node that does not hold the actor: an event of the
// guest that sets an alarm, PUT …/alarm, POST …/alarm:fire (of a guest
// since fixed) and DELETE of the actor each remove that actor's dead
// letter and its record in the bucket, and no other's; an event that sets
// no alarm leaves it listed. On the in-memory bucket and on versitygw.
func TestADeadLetterGoesWhenItsAlarmIsSetAgainOrItsActorDeleted(t *testing.T) {
	t.Parallel()
	classes := map[string][]byte{"scripted": testguest.Build(t, testguest.Scripted)}
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		eng := []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)}
		a := serveHost(t, b, "a", classes, hostConfig{start: true, engine: eng})
		other := serveHost(t, b, "b", classes, hostConfig{engine: eng})
		actor := func(name string) abi.ActorID { return abi.ActorID{Tenant: "t", Class: "scripted", Name: name} }
		event, put, fire, deleted, kept := actor("by-event"), actor("by-put"), actor("by-fire"), actor("deleted"), actor("kept")
		giveUp(t, a.URL, event, put, fire, deleted, kept) // a holds them
		listed := func(after string, want ...abi.ActorID) {
			t.Helper()
			var names []string
			for _, id := range want {
				names = append(names, id.Class+"/"+id.Name)
			}
			slices.Sort(names)
			if got := letterNames(deadLetters(t, other.URL, "", "").DeadLetters); got != strings.Join(names, ",") {
				t.Fatalf("after %s: listed %s, want %s", after, got, strings.Join(names, ","))
			}
		}
		future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)

		request(t, other.URL, event, "getkv log")
		listed("an event of by-event that sets no alarm", event, put, fire, deleted, kept)
		request(t, other.URL, event, "set "+future)
		listed("an event of by-event that sets an alarm", put, fire, deleted, kept)

		if status, said := callJSON(t, "PUT", other.URL+"/v1/actors/t/scripted/by-put/alarm", "", `{"at_ms": `+future+`}`, nil); status != 200 {
			t.Fatalf("PUT …/alarm of by-put: %d %s", status, said)
		}
		listed("PUT …/alarm of by-put", fire, deleted, kept)

		request(t, other.URL, fire, "mode ok")
		var st node.AlarmState
		if status, said := callJSON(t, "POST", other.URL+"/v1/actors/t/scripted/by-fire/alarm:fire", "", "", &st); status != 200 || st.Node != "a" || st.Fired == nil || !st.Fired.Ran || st.Fired.Error != "" {
			t.Fatalf("alarm:fire of by-fire: %d %s, by %q, %+v; want on-alarm run by a without error", status, said, st.Node, st.Fired)
		}
		listed("alarm:fire of by-fire", deleted, kept)

		if status, said := callJSON(t, "DELETE", other.URL+"/v1/actors/t/scripted/deleted", "", "", nil); status != http.StatusNoContent {
			t.Fatalf("DELETE of deleted: %d %s", status, said)
		}
		listed("DELETE of deleted", kept)

		for _, id := range []abi.ActorID{event, put, fire, deleted, kept} {
			_, _, err := b.Get(ctx, "cluster/dead-letters/"+id.Path())
			if gone := errors.Is(err, bucket.ErrNotFound); gone != (id != kept) || (!gone && err != nil) {
				t.Errorf("%s's dead-letter record: %v; want it deleted for all but kept", id, err)
			}
		}
	})
}
