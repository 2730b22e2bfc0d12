package node

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/sweeper"
)

// The operator console (Config.Console, keepnode -ui): HTML pages at /ui,
// rendered on the server, without script or assets from elsewhere:
//
//	GET  /ui/                                       the nodes (the operator) or the tenant's alarms (a tenant)
//	GET  /ui/login, POST /ui/login                  sign in with a token
//	POST /ui/logout                                 sign out
//	GET  /ui/nodes                                  the live nodes: lease, build, classes (the operator)
//	GET  /ui/sweeps                                 this node's last sweep and its counts (the operator)
//	GET  /ui/tenants[?tenant=T]                     the tenants with alarms or dead letters (the operator)
//	GET  /ui/tenants/{tenant}/alarms[?within=D]     the tenant's overdue alarms, and those due within D
//	GET  /ui/tenants/{tenant}/dead-letters          its dead letters, each with a redrive button
//	POST /ui/tenants/{tenant}/dead-letters/redrive  redrive one: the API's redrive (runLetters)
//	GET  /ui/style.css
//
// Signing in: the token (the API's, Security) is typed into a form and sent
// once, in a POST body, never in a URL. The node keeps a session for it in
// memory and answers with a cookie that names the session: random, scoped
// to /ui, HttpOnly (no script reads it), SameSite=Strict (no other site's
// page sends it), Secure on a TLS listener, for consoleSessionTTL. A restart
// ends every session. The peer token does not sign in: it is the nodes'.
// On a node without tokens the console is as open as its API.
//
// Every POST carries a form token, an HMAC of the session and the form's
// action under a key of this process, besides the SameSite cookie: a page
// of another site cannot read it, so it cannot make the browser send the
// form.

// consoleRoot is the console's path.
const consoleRoot = "/ui"

// consoleCookie is the cookie of a console session.
const consoleCookie = "wasmkeep_console"

// consoleSessionTTL is how long a console session lasts after sign-in.
const consoleSessionTTL = 12 * time.Hour

// maxConsoleSessions bounds the sessions a node keeps: past it, a sign-in
// ends the oldest.
const maxConsoleSessions = 1000

// consolePageLimit is the most alarms, dead letters or tenants a page lists.
const consolePageLimit = 200

// consoleForm bounds a console form's body.
const consoleForm = 4 << 10

//go:embed console
var consoleFiles embed.FS

// consoleSession is one signed-in browser.
type consoleSession struct {
	p principal
	// token is the token signed in with, kept in memory: a redrive
	// forwarded to the holder without a peer token carries it, as the
	// API forwards a client's own.
	token   string
	expires time.Time
}

type console struct {
	n     *Node
	key   []byte // of the form tokens, random per process
	pages map[string]*template.Template
	mux   *http.ServeMux

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*consoleSession // by the cookie's value's hash
}

// viewer is who a console request speaks for.
type viewer struct {
	sid      string // the session cookie's value; "" on an open node
	p        principal
	token    string
	signedIn bool
}

func (v viewer) operator() bool { return v.p.tenant == "" }

// reaches reports whether v may see tenant's pages.
func (v viewer) reaches(tenant string) bool { return v.p.tenant == "" || v.p.tenant == tenant }

// console builds the console's handler.
func (n *Node) console() http.Handler {
	c := &console{n: n, key: make([]byte, 32), pages: map[string]*template.Template{}, mux: http.NewServeMux(),
		sessions: map[[sha256.Size]byte]*consoleSession{}}
	rand.Read(c.key)
	for _, p := range []string{"login", "error", "nodes", "sweeps", "tenants", "alarms", "letters"} {
		c.pages[p] = template.Must(template.ParseFS(consoleFiles, "console/layout.html", "console/"+p+".html"))
	}
	css, err := fs.ReadFile(consoleFiles, "console/style.css")
	if err != nil {
		panic(err) // embedded
	}
	c.mux.HandleFunc("GET /ui/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(css)
	})
	c.mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusSeeOther) })
	c.mux.HandleFunc("GET /ui/{$}", c.signedIn(c.home))
	c.mux.HandleFunc("GET /ui/login", c.loginForm)
	c.mux.HandleFunc("POST /ui/login", c.login)
	c.mux.HandleFunc("POST /ui/logout", c.signedIn(c.logout))
	c.mux.HandleFunc("GET /ui/nodes", c.signedIn(c.operatorOnly(c.nodes)))
	c.mux.HandleFunc("GET /ui/sweeps", c.signedIn(c.operatorOnly(c.sweeps)))
	c.mux.HandleFunc("GET /ui/tenants", c.signedIn(c.operatorOnly(c.tenants)))
	c.mux.HandleFunc("GET /ui/tenants/{tenant}/alarms", c.signedIn(c.tenantOnly(c.alarms)))
	c.mux.HandleFunc("GET /ui/tenants/{tenant}/dead-letters", c.signedIn(c.tenantOnly(c.letters)))
	c.mux.HandleFunc("POST /ui/tenants/{tenant}/dead-letters/redrive", c.signedIn(c.tenantOnly(c.redrive)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Nothing from elsewhere, no script, no framing; pages not kept.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		c.mux.ServeHTTP(w, r)
	})
}

// pageData is what the layout shows around a page's Body.
type pageData struct {
	Title       string
	Node        string
	Operator    bool
	Tenant      string // the tenant whose pages the navigation links
	SignedIn    bool
	LogoutToken string
	Now         string
	Body        any
}

func (c *console) nodeName() string {
	if c.n.leases != nil {
		return c.n.leases.NodeID()
	}
	return "(running alone)"
}

// render writes page with status.
func (c *console) render(w http.ResponseWriter, status int, page, title string, v viewer, tenant string, body any) {
	d := pageData{Title: title, Node: c.nodeName(), Operator: v.signedIn && v.operator(), SignedIn: v.signedIn && v.sid != "",
		Now: c.n.cfg.Clock.Now().UTC().Format(time.RFC3339), Body: body, Tenant: tenant}
	if v.signedIn && v.p.tenant != "" {
		d.Tenant = v.p.tenant
	}
	if d.SignedIn {
		d.LogoutToken = c.formToken(v, "logout")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages[page].ExecuteTemplate(w, "layout", d); err != nil {
		c.n.log.Warn("console: a page could not be rendered", "page", page, "error", err)
	}
}

// errorBody is the body of the error page.
type errorBody struct{ Cause string }

func (c *console) fail(w http.ResponseWriter, status int, v viewer, cause string) {
	c.render(w, status, "error", http.StatusText(status), v, "", errorBody{Cause: cause})
}

// refuse answers a request that is not signed in: 401, with the sign-in
// form and the reason.
func (c *console) refuse(w http.ResponseWriter, cause string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="wasmkeep"`)
	c.render(w, http.StatusUnauthorized, "login", "Sign in", viewer{}, "", errorBody{Cause: cause})
}

// sessionKey is the key of a session in the map: the cookie's value hashed.
func sessionKey(sid string) [sha256.Size]byte { return sha256.Sum256([]byte(sid)) }

// errNoSession and errEndedSession are why a request is not signed in.
var (
	errNoSession    = errors.New("this console needs a token: sign in with the operator's token or a tenant's")
	errEndedSession = errors.New("this session ended (signed out, past 12 hours, or the node restarted): sign in again")
)

// who returns the viewer of a request: anyone on an open node, else the
// session its cookie names.
func (c *console) who(r *http.Request) (viewer, error) {
	if c.n.sec.open {
		return viewer{signedIn: true}, nil
	}
	ck, err := r.Cookie(consoleCookie)
	if err != nil || ck.Value == "" {
		return viewer{}, errNoSession
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := sessionKey(ck.Value)
	s := c.sessions[k]
	if s == nil {
		return viewer{}, errEndedSession
	}
	if !c.n.cfg.Clock.Now().Before(s.expires) {
		delete(c.sessions, k)
		return viewer{}, errEndedSession
	}
	return viewer{sid: ck.Value, p: s.p, token: s.token, signedIn: true}, nil
}

// signedIn serves h to a signed-in viewer; others get the sign-in form
// (401).
func (c *console) signedIn(h func(http.ResponseWriter, *http.Request, viewer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := c.who(r)
		if err != nil {
			c.refuse(w, err.Error())
			return
		}
		h(w, r, v)
	}
}

// operatorOnly serves h to the operator; a tenant's session gets a 403.
func (c *console) operatorOnly(h func(http.ResponseWriter, *http.Request, viewer)) func(http.ResponseWriter, *http.Request, viewer) {
	return func(w http.ResponseWriter, r *http.Request, v viewer) {
		if !v.operator() {
			c.fail(w, http.StatusForbidden, v, fmt.Sprintf("the token of tenant %q shows only that tenant's alarms and dead letters: the nodes, the sweeps and the other tenants need the operator's token", v.p.tenant))
			return
		}
		h(w, r, v)
	}
}

// tenantOnly serves h for a valid {tenant} the viewer reaches.
func (c *console) tenantOnly(h func(http.ResponseWriter, *http.Request, viewer)) func(http.ResponseWriter, *http.Request, viewer) {
	return func(w http.ResponseWriter, r *http.Request, v viewer) {
		t := r.PathValue("tenant")
		if err := abi.ValidateTenant(t); err != nil {
			c.fail(w, http.StatusBadRequest, v, err.Error())
			return
		}
		if !v.reaches(t) {
			c.fail(w, http.StatusForbidden, v, fmt.Sprintf("the token of tenant %q does not reach tenant %q", v.p.tenant, t))
			return
		}
		h(w, r, v)
	}
}

// formToken is the token a form of the viewer's session for action
// carries: an HMAC, so each form has its own and the node keeps none.
func (c *console) formToken(v viewer, action string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(v.sid))
	m.Write([]byte{0})
	m.Write([]byte(action))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkForm reads a POST's form and checks its form token for action.
func (c *console) checkForm(w http.ResponseWriter, r *http.Request, v viewer, action string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, consoleForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, http.StatusBadRequest, v, fmt.Sprintf("the form could not be read: %v", err))
		return false
	}
	got, want := r.PostForm.Get("form_token"), c.formToken(v, action)
	if got == "" || !hmac.Equal([]byte(got), []byte(want)) {
		c.fail(w, http.StatusForbidden, v, "the form token is missing or is not this form's (a form from another page, or from before a sign-in or a restart): reload the page and submit it again")
		return false
	}
	return true
}

func (c *console) loginForm(w http.ResponseWriter, r *http.Request) {
	if c.n.sec.open {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	c.render(w, http.StatusOK, "login", "Sign in", viewer{}, "", errorBody{})
}

func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if c.n.sec.open {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, consoleForm)
	if err := r.ParseForm(); err != nil {
		c.refuse(w, fmt.Sprintf("the sign-in form could not be read: %v", err))
		return
	}
	tok := r.PostForm.Get("token")
	if tok == "" {
		c.refuse(w, "type a token to sign in")
		return
	}
	p, err := c.n.sec.whoToken(tok)
	if err != nil {
		c.refuse(w, err.Error())
		return
	}
	if p.peer {
		c.refuse(w, "the peer token is the nodes' own credential and does not sign in to the console: use the operator's token or a tenant's")
		return
	}
	b := make([]byte, 32)
	rand.Read(b)
	sid := base64.RawURLEncoding.EncodeToString(b)
	now := c.n.cfg.Clock.Now()
	c.mu.Lock()
	for k, s := range c.sessions {
		if !now.Before(s.expires) {
			delete(c.sessions, k)
		}
	}
	if len(c.sessions) >= maxConsoleSessions {
		var oldest [sha256.Size]byte
		first := true
		for k, s := range c.sessions {
			if first || s.expires.Before(c.sessions[oldest].expires) {
				oldest, first = k, false
			}
		}
		delete(c.sessions, oldest)
	}
	c.sessions[sessionKey(sid)] = &consoleSession{p: p, token: tok, expires: now.Add(consoleSessionTTL)}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: sid, Path: consoleRoot, MaxAge: int(consoleSessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, r *http.Request, v viewer) {
	if !c.checkForm(w, r, v, "logout") {
		return
	}
	c.mu.Lock()
	delete(c.sessions, sessionKey(v.sid))
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: consoleRoot, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func (c *console) home(w http.ResponseWriter, r *http.Request, v viewer) {
	if v.operator() {
		http.Redirect(w, r, "/ui/nodes", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/ui/tenants/"+v.p.tenant+"/alarms", http.StatusSeeOther)
}

// consoleNode is a row of the nodes page.
type consoleNode struct {
	ID, Addr          string
	Self, LeaseOK     bool
	Lease, ValidFor   string
	Version, Revision string
	Classes           string
}

type nodesBody struct {
	Alone bool
	Nodes []consoleNode
}

func (c *console) nodes(w http.ResponseWriter, r *http.Request, v viewer) {
	n := c.n
	version, revision := buildVersion()
	if revision == "" {
		revision = "not recorded"
	}
	classes := slices.Sorted(func(yield func(string) bool) {
		for k := range n.cfg.Classes {
			if !yield(k) {
				return
			}
		}
	})
	self := consoleNode{ID: c.nodeName(), Self: true, Version: version + " (" + runtime.Version() + ")", Revision: revision,
		Classes: strings.Join(classes, ", "), Lease: "none: running alone", LeaseOK: true, ValidFor: "-"}
	body := nodesBody{Alone: n.leases == nil}
	if n.leases == nil {
		body.Nodes = []consoleNode{self}
		c.render(w, http.StatusOK, "nodes", "Nodes", v, "", body)
		return
	}
	self.Addr = n.cfg.Cluster.Addr
	if until := n.leases.ValidUntil(); !until.IsZero() && n.leases.Valid() {
		self.Lease = "valid"
		self.ValidFor = max(0, until.Sub(n.cfg.Clock.Now())).Round(100 * time.Millisecond).String()
	} else {
		self.Lease, self.LeaseOK = "not valid: the last renewal failed or came too late", false
	}
	body.Nodes = append(body.Nodes, self)
	for _, o := range n.leases.Live() {
		if o.ID == self.ID {
			continue
		}
		cls := strings.Join(o.Classes, ", ")
		if o.AllClasses {
			cls = "every class"
		}
		body.Nodes = append(body.Nodes, consoleNode{ID: o.ID, Addr: o.Addr, Lease: "live: seen renewed", LeaseOK: true,
			ValidFor: "not known here", Classes: cls})
	}
	c.peerBuilds(r.Context(), body.Nodes[1:])
	c.render(w, http.StatusOK, "nodes", "Nodes", v, "", body)
}

// peerBuilds fills in each other node's build from its lease, read now
// (cluster.ReadLease: one GET each, a few at once, within
// consoleLeaseReads): what this node's reading of the leases keeps of a
// node may be an earlier process's under its ID, and a node restarted on
// a new build in a rolling upgrade is the one an operator looks for.
func (c *console) peerBuilds(ctx context.Context, peers []consoleNode) {
	ctx, cancel := context.WithTimeout(ctx, consoleLeaseReads)
	defer cancel()
	cl := c.n.cfg.Cluster
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range peers {
		p := &peers[i]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			info, ok, err := cluster.ReadLease(ctx, cl.Bucket, cl.Prefix, p.ID)
			switch {
			case err != nil:
				p.Version, p.Revision = "unknown: its lease could not be read ("+err.Error()+")", "unknown"
			case !ok:
				p.Version, p.Revision = "unknown: its lease is gone (the node shut down)", "unknown"
			case info.Build.Version == "":
				p.Version, p.Revision = "not in its lease (a build from before leases named theirs)", "not in its lease"
			default:
				p.Version, p.Revision = info.Build.Version, info.Build.Revision
				if p.Revision == "" {
					p.Revision = "not recorded"
				}
			}
		})
	}
	wg.Wait()
}

// consoleLeaseReads bounds the reads of the other nodes' leases for the
// nodes page.
const consoleLeaseReads = 5 * time.Second

type sweepsBody struct {
	Alone     bool
	Never     bool
	Last, Err string
	Period    string
	Stats     sweeper.Stats
}

func (c *console) sweeps(w http.ResponseWriter, r *http.Request, v viewer) {
	n := c.n
	body := sweepsBody{Alone: n.cfg.Cluster == nil}
	if !body.Alone {
		st := n.plugin.SweepStats()
		body.Stats = st
		period := n.cfg.Cluster.SweepPeriod
		if period <= 0 {
			period = sweeper.DefaultPeriod
		}
		body.Period = period.String()
		if st.Last.IsZero() {
			body.Never, body.Last = true, "never"
		} else {
			body.Last = fmt.Sprintf("%s (%s ago)", st.Last.UTC().Format(time.RFC3339), n.cfg.Clock.Now().Sub(st.Last).Round(time.Second))
		}
		if st.LastErr != nil {
			body.Err = st.LastErr.Error()
		}
	}
	c.render(w, http.StatusOK, "sweeps", "Sweeps of node "+c.nodeName(), v, "", body)
}

type tenantsBody struct {
	Tenants []string
	More    bool
}

func (c *console) tenants(w http.ResponseWriter, r *http.Request, v viewer) {
	if t := r.URL.Query().Get("tenant"); t != "" {
		if err := abi.ValidateTenant(t); err != nil {
			c.fail(w, http.StatusBadRequest, v, err.Error())
			return
		}
		http.Redirect(w, r, "/ui/tenants/"+t+"/alarms", http.StatusSeeOther)
		return
	}
	ts, err := c.n.consoleTenants(r)
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, v, err.Error())
		return
	}
	body := tenantsBody{Tenants: ts}
	if len(ts) > consolePageLimit {
		body.Tenants, body.More = ts[:consolePageLimit], true
	}
	c.render(w, http.StatusOK, "tenants", "Tenants", v, "", body)
}

// consoleTenants lists the tenants with index entries or dead letters: the
// folders of the index and of the records in the bucket, or on a node
// running alone those of its timer and its records' directory.
func (n *Node) consoleTenants(r *http.Request) ([]string, error) {
	set := map[string]bool{}
	if cl := n.cfg.Cluster; cl != nil {
		for _, root := range []string{alarmindex.Root, letterRoot} {
			folders, err := cl.Bucket.ListFolders(r.Context(), cl.Prefix+root, consolePageLimit+1)
			if err != nil {
				return nil, fmt.Errorf("list the tenants under %s%s: %w", cl.Prefix, root, err)
			}
			for _, f := range folders {
				set[strings.TrimSuffix(strings.TrimPrefix(f, cl.Prefix+root), "/")] = true
			}
		}
	} else {
		for key := range n.timer.Under("") {
			t, _, _ := strings.Cut(key, "/")
			set[t] = true
		}
		es, err := os.ReadDir(filepath.Join(n.cfg.DataDir, letterDir))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list the tenants with dead letters: %w", err)
		}
		for _, e := range es {
			if e.IsDir() {
				set[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		if abi.ValidateTenant(t) == nil {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out, nil
}

// consoleAlarm is a row of the alarms page.
type consoleAlarm struct{ Class, Name, Due, Rel string }

type alarmsBody struct {
	Overdue, Soon []consoleAlarm
	Within        string
	Choices       []string
	More          bool
	Limit         int
	Source        string
}

// withinChoices are the windows the alarms page offers; the first is the
// default.
var withinChoices = []string{"15m0s", "1m0s", "5m0s", "1h0m0s", "24h0m0s"}

// displayName is an actor's name as a page shows it: hex when not UTF-8.
func displayName(name, nameHex string) string {
	if nameHex != "" {
		return "hex:" + nameHex
	}
	return name
}

func (c *console) alarms(w http.ResponseWriter, r *http.Request, v viewer) {
	n := c.n
	tenant := r.PathValue("tenant")
	within := withinChoices[0]
	if q := r.URL.Query().Get("within"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil || !slices.Contains(withinChoices, d.String()) {
			c.fail(w, http.StatusBadRequest, v, fmt.Sprintf("within %q is not one of %s", q, strings.Join(withinChoices, ", ")))
			return
		}
		within = d.String()
	}
	d, _ := time.ParseDuration(within)
	now := n.cfg.Clock.Now()
	nowMs, before := now.UnixMilli(), now.Add(d).UnixMilli()
	keep := func(_ abi.ActorID, due int64) bool { return due <= before }
	var list AlarmList
	body := alarmsBody{Within: within, Choices: withinChoices, Limit: consolePageLimit}
	if n.cfg.Cluster == nil {
		list = n.timerAlarms(tenant, "", consolePageLimit, keep)
		body.Source = "node's timer (a node running alone)"
	} else {
		var err error
		if list, err = n.indexAlarms(r.Context(), tenant, "", 0, before, consolePageLimit, keep); err != nil {
			c.fail(w, http.StatusServiceUnavailable, v, err.Error())
			return
		}
		body.Source = "alarm index in the bucket"
	}
	body.More = list.NextCursor != ""
	for _, a := range list.Alarms {
		row := consoleAlarm{Class: a.Class, Name: displayName(a.Name, a.NameHex), Due: a.Due}
		if a.DueMs <= nowMs {
			row.Rel = "overdue by " + (time.Duration(nowMs-a.DueMs) * time.Millisecond).Round(time.Second).String()
			body.Overdue = append(body.Overdue, row)
		} else {
			row.Rel = "in " + (time.Duration(a.DueMs-nowMs) * time.Millisecond).Round(time.Second).String()
			body.Soon = append(body.Soon, row)
		}
	}
	c.render(w, http.StatusOK, "alarms", "Alarms of tenant "+tenant, v, tenant, body)
}

// consoleLetter is a row of the dead letters page.
type consoleLetter struct {
	Class, Name, NameHex     string
	Scheduled, Failed, Error string
	Attempts                 int
	FormToken                string
}

type lettersBody struct {
	Letters  []consoleLetter
	More     bool
	Limit    int
	Redriven string
}

// redriveAction is the action a redrive form's token is for: one actor.
func redriveAction(tenant, class, nameHex string) string {
	return "redrive/" + tenant + "/" + class + "/" + nameHex
}

func (c *console) letters(w http.ResponseWriter, r *http.Request, v viewer) {
	tenant := r.PathValue("tenant")
	list, next, err := c.n.listLetters(r.Context(), tenant, "", "", consolePageLimit)
	if err != nil {
		c.fail(w, http.StatusServiceUnavailable, v, err.Error())
		return
	}
	body := lettersBody{More: next != "", Limit: consolePageLimit, Redriven: r.URL.Query().Get("redriven")}
	for _, dl := range list {
		hexName := abi.ActorID{Name: dl.Name}.NameHex()
		if dl.NameHex != "" {
			hexName = dl.NameHex
		}
		body.Letters = append(body.Letters, consoleLetter{Class: dl.Class, Name: displayName(dl.Name, dl.NameHex), NameHex: hexName,
			Scheduled: dl.Scheduled, Failed: dl.Failed, Error: dl.Error, Attempts: dl.Attempts,
			FormToken: c.formToken(v, redriveAction(tenant, dl.Class, hexName))})
	}
	c.render(w, http.StatusOK, "letters", "Dead letters of tenant "+tenant, v, tenant, body)
}

func (c *console) redrive(w http.ResponseWriter, r *http.Request, v viewer) {
	tenant := r.PathValue("tenant")
	r.Body = http.MaxBytesReader(w, r.Body, consoleForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, http.StatusBadRequest, v, fmt.Sprintf("the redrive form could not be read: %v", err))
		return
	}
	class, nameHex := r.PostForm.Get("class"), r.PostForm.Get("name_hex")
	if !c.checkForm(w, r, v, redriveAction(tenant, class, nameHex)) {
		return
	}
	name, err := abi.DecodeNameHex(nameHex)
	if err != nil {
		c.fail(w, http.StatusBadRequest, v, fmt.Sprintf("the redrive form's name_hex %q: %v", nameHex, err))
		return
	}
	if err := abi.ValidateClass(class); err != nil {
		c.fail(w, http.StatusBadRequest, v, err.Error())
		return
	}
	// The API's redrive; a call forwarded to the holder carries the peer
	// token, or without one the token signed in with.
	fr := r
	if v.token != "" {
		fr = r.Clone(r.Context())
		fr.Header.Set("Authorization", "Bearer "+v.token)
	}
	out, f := c.n.runLetters(fr, tenant, "redrive", DeadLetterSelect{Class: class, Name: name, Limit: 1})
	if f != nil {
		c.fail(w, f.status, v, f.err.Error())
		return
	}
	if out.Failed > 0 {
		c.fail(w, http.StatusServiceUnavailable, v, out.Actors[0].Detail)
		return
	}
	id := abi.ActorID{Tenant: tenant, Class: class, Name: name}
	http.Redirect(w, r, "/ui/tenants/"+tenant+"/dead-letters?redriven="+url.QueryEscape(id.Class+"/"+displayName(name, nameHexIfNotUTF8(id))), http.StatusSeeOther)
}

// nameHexIfNotUTF8 is the actor's name in hex when it is not UTF-8, else "".
func nameHexIfNotUTF8(id abi.ActorID) string {
	if alarmEntry(id, 0).NameHex != "" {
		return id.NameHex()
	}
	return ""
}
