package consoletest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// The tokens of the tests' nodes.
const (
	operatorToken = "operator-token-0123456789"
	tenantTToken  = "tenant-t-token-0123456789"
	tenantUToken  = "tenant-u-token-0123456789"
	peerToken     = "peer-token-0123456789"
)

var security = node.Security{Token: operatorToken, PeerToken: peerToken,
	TenantTokens: map[string]string{"t": tenantTToken, "u": tenantUToken}}

// served is a node serving its HTTP API on a port of its own.
type served struct {
	*node.Node
	URL string
}

// serve starts a cluster node on b, named name, serving the scripted
// guest (one attempt per alarm, so a failure is a dead letter at once).
func serve(t *testing.T, b bucket.Bucket, name string, sec node.Security, console bool) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"scripted": testguest.Build(t, testguest.Scripted)},
		Security: sec, Console: console,
		EngineOptions: []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)},
		Logger:        hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}}),
		Cluster: &node.ClusterConfig{Bucket: b, Prefix: "cluster/", NodeID: name, Addr: ln.Addr().String(),
			IdleTimeout: time.Hour, SweepPeriod: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(context.Background())
	srv := &http.Server{Handler: n.Handler()}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		n.Close(context.Background())
	})
	return &served{Node: n, URL: "http://" + ln.Addr().String()}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// api sends a call of the HTTP API with the operator's token and returns
// its status and body.
func api(t *testing.T, method, u, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// request runs a request event on the actor and returns the response.
func request(t *testing.T, base string, id abi.ActorID, body string) string {
	t.Helper()
	status, out := api(t, "POST", base+"/v1/actors/"+id.Tenant+"/"+id.Class+"/"+url.PathEscape(id.Name)+"?kind=exec-durable", body)
	if status != 200 {
		t.Fatalf("request %q to %s: %d %s", body, id, status, out)
	}
	return out
}

// deadLetters lists the tenant's dead letters through the API, as
// class/name.
func deadLetters(t *testing.T, base, tenant string) []string {
	t.Helper()
	status, out := api(t, "GET", base+"/v1/tenants/"+tenant+"/dead-letters", "")
	if status != 200 {
		t.Fatalf("list the dead letters of %s: %d %s", tenant, status, out)
	}
	var l node.DeadLetterList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("list the dead letters of %s: %q: %v", tenant, out, err)
	}
	var names []string
	for _, d := range l.DeadLetters {
		names = append(names, d.Class+"/"+d.Name)
	}
	return names
}

// waitFor polls cond until it holds, failing the test after a long while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// giveUp makes the actor's on-alarm fail its only attempt and waits for
// its dead letter to be listed.
func giveUp(t *testing.T, base string, id abi.ActorID) {
	t.Helper()
	request(t, base, id, "mode fail")
	request(t, base, id, "set "+strconv.FormatInt(time.Now().UnixMilli(), 10))
	waitFor(t, "the dead letter of "+id.String(), func() bool {
		return strings.Contains(strings.Join(deadLetters(t, base, id.Tenant), ","), id.Class+"/"+id.Name)
	})
}

// setIn sets the actor's alarm d from now.
func setIn(t *testing.T, base string, id abi.ActorID, d time.Duration) {
	t.Helper()
	request(t, base, id, "set "+strconv.FormatInt(time.Now().Add(d).UnixMilli(), 10))
}

// overdue writes an index entry, an hour overdue, for an actor of a class
// no node serves: it stays overdue, as an alarm does whose node cannot
// deliver it.
func overdue(t *testing.T, b bucket.Bucket, id abi.ActorID) {
	t.Helper()
	key := "cluster/" + alarmindex.LegacyKey(id, time.Now().Add(-time.Hour).UnixMilli())
	if _, err := b.Put(context.Background(), key, nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
}

// browser is a console client: a cookie jar, redirects not followed.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is one answer of the console.
type page struct {
	status   int
	body     string
	location string
}

func (b *browser) get(path string) page {
	b.t.Helper()
	resp, err := b.c.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.read(resp)
}

func (b *browser) post(path string, form url.Values) page {
	b.t.Helper()
	resp, err := b.c.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.read(resp)
}

func (b *browser) read(resp *http.Response) page {
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, body: string(body), location: resp.Header.Get("Location")}
}

// signIn signs in with tok and checks the session cookie's attributes.
func (b *browser) signIn(tok string) {
	b.t.Helper()
	resp, err := b.c.PostForm(b.base+"/ui/login", url.Values{"token": {tok}})
	if err != nil {
		b.t.Fatal(err)
	}
	p := b.read(resp)
	if p.status != http.StatusSeeOther {
		b.t.Fatalf("sign in: %d %s", p.status, p.body)
	}
	if strings.Contains(p.location, tok) {
		b.t.Fatalf("sign in: redirected to %q, which holds the token", p.location)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "wasmkeep_console" {
			ck = c
		}
	}
	if ck == nil || ck.Path != "/ui" || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || strings.Contains(ck.Value, tok) {
		b.t.Fatalf("sign in: session cookie %+v; want one for /ui, HttpOnly, SameSite=Strict, without the token", ck)
	}
}

// The console is served only when asked for: without Config.Console /ui
// is an unknown path (404), with or without tokens.
func TestConsoleIsOffByDefault(t *testing.T) {
	b := bucket.NewMem()
	open := serve(t, b, "open", node.Security{}, false)
	for _, path := range []string{"/ui", "/ui/", "/ui/login", "/ui/nodes"} {
		if p := newBrowser(t, open.URL).get(path); p.status != http.StatusNotFound {
			t.Errorf("GET %s on an open node without the console: %d, want 404", path, p.status)
		}
	}
	guarded := serve(t, bucket.NewMem(), "guarded", security, false)
	if status, out := api(t, "GET", guarded.URL+"/ui/nodes", ""); status != http.StatusNotFound {
		t.Errorf("GET /ui/nodes with the operator's token on a node without the console: %d %s, want 404", status, out)
	}
	on := serve(t, bucket.NewMem(), "on", node.Security{}, true)
	if p := newBrowser(t, on.URL).get("/ui/nodes"); p.status != http.StatusOK || !strings.Contains(p.body, `id="nodes"`) {
		t.Errorf("GET /ui/nodes on an open node with the console: %d, want 200 and the nodes", p.status)
	}
}

// Without a session the console answers 401 with the sign-in form: no
// token, a token the node does not know, the peer token, a bearer token
// alone, or a cookie of a session the node does not have.
func TestConsoleRefusesARequestWithoutAToken(t *testing.T) {
	a := serve(t, bucket.NewMem(), "a", security, true)
	br := newBrowser(t, a.URL)
	for _, path := range []string{"/ui/", "/ui/nodes", "/ui/sweeps", "/ui/tenants", "/ui/tenants/t/alarms", "/ui/tenants/t/dead-letters"} {
		if p := br.get(path); p.status != http.StatusUnauthorized || !strings.Contains(p.body, `name="token"`) {
			t.Errorf("GET %s without a token: %d, want 401 and the sign-in form", path, p.status)
		}
	}
	if p := br.post("/ui/tenants/t/dead-letters/redrive", url.Values{"class": {"scripted"}, "name_hex": {"7031"}}); p.status != http.StatusUnauthorized {
		t.Errorf("POST redrive without a token: %d, want 401", p.status)
	}
	for _, tok := range []string{"not-a-token", peerToken} {
		if p := br.post("/ui/login", url.Values{"token": {tok}}); p.status != http.StatusUnauthorized {
			t.Errorf("sign in with %q: %d, want 401", tok, p.status)
		}
		if p := br.get("/ui/nodes"); p.status != http.StatusUnauthorized {
			t.Errorf("GET /ui/nodes after signing in with %q: %d, want 401", tok, p.status)
		}
	}
	// The API's bearer token does not open the console's pages: they
	// answer to a session only.
	req, _ := http.NewRequest("GET", a.URL+"/ui/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /ui/nodes with a bearer token: %v %v, want 401", resp.Status, err)
	}
	forged := newBrowser(t, a.URL)
	u, _ := url.Parse(a.URL + "/ui/")
	forged.c.Jar.SetCookies(u, []*http.Cookie{{Name: "wasmkeep_console", Value: "made-up", Path: "/ui"}})
	if p := forged.get("/ui/nodes"); p.status != http.StatusUnauthorized || !strings.Contains(p.body, "session ended") {
		t.Errorf("GET /ui/nodes with a made-up session: %d, want 401 saying the session ended", p.status)
	}

	br.signIn(operatorToken)
	if p := br.get("/ui/nodes"); p.status != http.StatusOK || !strings.Contains(p.body, ">a") {
		t.Errorf("GET /ui/nodes signed in: %d %s", p.status, p.body)
	}
	// Signed out, the session is gone.
	p := br.get("/ui/nodes")
	tok := formToken(t, p.body, "/ui/logout")
	if p := br.post("/ui/logout", url.Values{"form_token": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d %s", p.status, p.body)
	}
	if p := br.get("/ui/nodes"); p.status != http.StatusUnauthorized {
		t.Errorf("GET /ui/nodes after signing out: %d, want 401", p.status)
	}
}

// formToken finds the form_token of the form whose action is action.
func formToken(t *testing.T, body, action string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<form[^>]*action="` + regexp.QuoteMeta(action) + `"[^>]*>.*?name="form_token" value="([^"]+)"`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form to %s with a form_token in %s", action, body)
	}
	return m[1]
}

// A tenant's token shows that tenant's alarms and dead letters, and
// nothing of another tenant, of the nodes or of the sweeps; the
// operator's shows every tenant.
func TestConsoleTenantSeesOnlyItsTenant(t *testing.T) {
	b := bucket.NewMem()
	a := serve(t, b, "a", security, true)
	secretT := abi.ActorID{Tenant: "t", Class: "scripted", Name: "secret-of-t"}
	ownU := abi.ActorID{Tenant: "u", Class: "scripted", Name: "own-of-u"}
	setIn(t, a.URL, secretT, 5*time.Minute)
	setIn(t, a.URL, ownU, 5*time.Minute)
	giveUp(t, a.URL, abi.ActorID{Tenant: "t", Class: "scripted", Name: "letter-of-t"})

	u := newBrowser(t, a.URL)
	u.signIn(tenantUToken)
	if p := u.get("/ui/"); p.location != "/ui/tenants/u/alarms" {
		t.Errorf("GET /ui/ as tenant u: to %q, want its alarms", p.location)
	}
	if p := u.get("/ui/tenants/u/alarms"); p.status != http.StatusOK || !strings.Contains(p.body, "own-of-u") {
		t.Errorf("tenant u's alarms as u: %d, want 200 with own-of-u: %s", p.status, p.body)
	}
	for _, path := range []string{"/ui/tenants/t/alarms", "/ui/tenants/t/dead-letters", "/ui/nodes", "/ui/sweeps", "/ui/tenants"} {
		p := u.get(path)
		if p.status != http.StatusForbidden {
			t.Errorf("GET %s as tenant u: %d, want 403", path, p.status)
		}
		if strings.Contains(p.body, "secret-of-t") || strings.Contains(p.body, "letter-of-t") {
			t.Errorf("GET %s as tenant u shows tenant t's actors: %s", path, p.body)
		}
	}
	// A redrive of t's dead letter, with a form token of u's own session.
	op := newBrowser(t, a.URL)
	op.signIn(operatorToken)
	letters := op.get("/ui/tenants/t/dead-letters")
	if !strings.Contains(letters.body, "letter-of-t") || !strings.Contains(op.get("/ui/tenants/t/alarms").body, "secret-of-t") {
		t.Fatalf("the operator does not see tenant t's dead letter and alarm: %s", letters.body)
	}
	if p := u.post("/ui/tenants/t/dead-letters/redrive", url.Values{"class": {"scripted"}, "name_hex": {hexName("letter-of-t")}, "form_token": {"x"}}); p.status != http.StatusForbidden {
		t.Errorf("POST a redrive of tenant t as tenant u: %d, want 403", p.status)
	}
	if got := deadLetters(t, a.URL, "t"); len(got) != 1 {
		t.Errorf("tenant t's dead letters after u's redrive: %v, want it kept", got)
	}
	if p := op.get("/ui/tenants"); !strings.Contains(p.body, `/ui/tenants/t/alarms`) || !strings.Contains(p.body, `/ui/tenants/u/alarms`) {
		t.Errorf("the operator's tenants: %s; want t and u", p.body)
	}
}

func hexName(name string) string { return abi.ActorID{Name: name}.NameHex() }

// The redrive form carries a form token of its session and its actor: a
// POST without it, with another form's, or with one of another session is
// refused (403) and redrives nothing; with its own it redrives.
func TestConsoleRedriveNeedsTheFormToken(t *testing.T) {
	a := serve(t, bucket.NewMem(), "a", security, true)
	p1 := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p1"}
	p2 := abi.ActorID{Tenant: "t", Class: "scripted", Name: "p2"}
	giveUp(t, a.URL, p1)
	giveUp(t, a.URL, p2)
	request(t, a.URL, p1, "mode ok")

	br := newBrowser(t, a.URL)
	br.signIn(tenantTToken)
	other := newBrowser(t, a.URL)
	other.signIn(operatorToken)
	page := br.get("/ui/tenants/t/dead-letters")
	own := formTokenFor(t, page.body, hexName("p1"))
	form := func(tok string) url.Values {
		return url.Values{"class": {"scripted"}, "name_hex": {hexName("p1")}, "form_token": {tok}}
	}
	for what, tok := range map[string]string{
		"no form token":                   "",
		"another actor's form token":      formTokenFor(t, page.body, hexName("p2")),
		"a form token of another session": formTokenFor(t, other.get("/ui/tenants/t/dead-letters").body, hexName("p1")),
	} {
		f := form(tok)
		if tok == "" {
			f.Del("form_token")
		}
		if p := br.post("/ui/tenants/t/dead-letters/redrive", f); p.status != http.StatusForbidden || !strings.Contains(p.body, "form token") {
			t.Errorf("redrive with %s: %d, want 403 naming the form token: %s", what, p.status, p.body)
		}
		if got := deadLetters(t, a.URL, "t"); len(got) != 2 {
			t.Fatalf("after a redrive with %s: dead letters %v, want both kept", what, got)
		}
	}
	p := br.post("/ui/tenants/t/dead-letters/redrive", form(own))
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location, "/ui/tenants/t/dead-letters?redriven=") {
		t.Fatalf("redrive with its form token: %d %q %s", p.status, p.location, p.body)
	}
	if got := strings.Join(deadLetters(t, a.URL, "t"), ","); got != "scripted/p2" {
		t.Errorf("after the redrive of p1: dead letters %s, want scripted/p2", got)
	}
	waitFor(t, "p1's redriven alarm to run", func() bool { return request(t, a.URL, p1, "getkv log") != "none" })
}

// formTokenFor finds the form_token of the redrive form of the actor
// whose name is nameHex.
func formTokenFor(t *testing.T, body, nameHex string) string {
	t.Helper()
	re := regexp.MustCompile(`name="name_hex" value="` + nameHex + `">\s*<input type="hidden" name="form_token" value="([^"]+)"`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no redrive form for %s in %s", nameHex, body)
	}
	return m[1]
}

// The nodes page shows each other node's build as its lease names it, read
// as the page is shown: another node's version and revision, and for a
// node whose lease names none (one of a build from before leases named
// theirs) that it does not.
func TestConsoleShowsEachNodesBuild(t *testing.T) {
	defer func(v, r string) { node.Version, node.Revision = v, r }(node.Version, node.Revision)
	node.Version, node.Revision = "v0.5.0-3-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01"
	ctx := context.Background()
	b := bucket.NewMem()
	// A node of an earlier build, live for ten minutes by the lease's TTL.
	if _, err := b.Put(ctx, "cluster/nodes/old", []byte(`{"node_id":"old","addr":"127.0.0.1:1","ttl_ms":600000,"renewed_ms":1,"seq":1,"instance":"i1","classes":null}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	a := serve(t, b, "a", node.Security{}, true)
	serve(t, b, "b", node.Security{}, true)
	if err := a.Leases().RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	// b's build as b's lease names it: the stamp, unless the test binary
	// recorded a version or commit of its own.
	lease, _, err := b.Get(ctx, "cluster/nodes/b")
	if err != nil {
		t.Fatal(err)
	}
	var want struct{ Version, Revision string }
	if err := json.Unmarshal(lease, &want); err != nil || want.Version == "" || want.Revision == "" {
		t.Fatalf("b's lease names no build: %s (%v)", lease, err)
	}
	p := newBrowser(t, a.URL).get("/ui/nodes")
	if p.status != http.StatusOK {
		t.Fatalf("GET /ui/nodes: %d\n%s", p.status, p.body)
	}
	rows := map[string]string{}
	for _, row := range regexp.MustCompile(`(?s)<tr class="node-row">.*?</tr>`).FindAllString(p.body, -1) {
		if m := regexp.MustCompile(`<td class="mono">(\w+)`).FindStringSubmatch(row); m != nil {
			rows[m[1]] = row
		}
	}
	if len(rows) != 3 {
		t.Fatalf("the nodes page shows %d nodes, want a, b and old:\n%s", len(rows), p.body)
	}
	if row := rows["b"]; !strings.Contains(row, ">"+want.Version+"<") || !strings.Contains(row, ">"+want.Revision+"<") {
		t.Errorf("b's row does not show the version %q and revision %q its lease names:\n%s", want.Version, want.Revision, row)
	}
	if row := rows["old"]; !strings.Contains(row, "not in its lease") || strings.Contains(row, want.Version) {
		t.Errorf("the row of a node whose lease names no build does not say so:\n%s", row)
	}
}
