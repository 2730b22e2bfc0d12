package node_test

// node/openapi.json is held to the handlers: every route the node serves
// is in it and nothing else, every JSON field of a response struct is in
// its schema with its type and whether it is always there, and every
// status it lists for a route is one a real node answers (on versitygw),
// with the documented content type, headers and fields.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/statetest"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// The parts of an OpenAPI 3.1 document the test reads.
type oaDoc struct {
	OpenAPI    string                      `json:"openapi"`
	Paths      map[string]map[string]oaRaw `json:"paths"`
	Components struct {
		Schemas   map[string]*oaSchema   `json:"schemas"`
		Responses map[string]*oaResponse `json:"responses"`
		Headers   map[string]*oaHeader   `json:"headers"`
	} `json:"components"`
}

type oaRaw = json.RawMessage

type oaOperation struct {
	Responses map[string]*oaResponse `json:"responses"`
}

type oaResponse struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema *oaSchema `json:"schema"`
	} `json:"content"`
	Headers map[string]*oaHeader `json:"headers"`
}

type oaHeader struct {
	Ref      string `json:"$ref"`
	Required bool   `json:"required"`
}

type oaSchema struct {
	Ref        string               `json:"$ref"`
	Type       any                  `json:"type"` // a string, or a list of them
	Required   []string             `json:"required"`
	Properties map[string]*oaSchema `json:"properties"`
	Items      *oaSchema            `json:"items"`
}

func loadOpenAPI(t *testing.T) *oaDoc {
	t.Helper()
	var d oaDoc
	if err := json.Unmarshal(node.OpenAPI, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Fatalf("openapi.json: version %q, want 3.1.0", d.OpenAPI)
	}
	return &d
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

// operations are the document's operations by mux pattern
// ("POST /v1/actors/{tenant}/{class}/{name}").
func (d *oaDoc) operations(t *testing.T) map[string]*oaOperation {
	t.Helper()
	out := map[string]*oaOperation{}
	for path, item := range d.Paths {
		for key, raw := range item {
			if !slices.Contains(httpMethods, key) {
				continue
			}
			var op oaOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("openapi.json %s %s: %v", key, path, err)
			}
			out[strings.ToUpper(key)+" "+path] = &op
		}
	}
	return out
}

func (d *oaDoc) schema(t *testing.T, s *oaSchema) *oaSchema {
	t.Helper()
	for s != nil && s.Ref != "" {
		name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
		if !ok || d.Components.Schemas[name] == nil {
			t.Fatalf("openapi.json: $ref %q names no schema", s.Ref)
		}
		s = d.Components.Schemas[name]
	}
	return s
}

func (d *oaDoc) response(t *testing.T, r *oaResponse) *oaResponse {
	t.Helper()
	if r != nil && r.Ref != "" {
		name, ok := strings.CutPrefix(r.Ref, "#/components/responses/")
		if !ok || d.Components.Responses[name] == nil {
			t.Fatalf("openapi.json: $ref %q names no response", r.Ref)
		}
		return d.Components.Responses[name]
	}
	return r
}

func (d *oaDoc) header(t *testing.T, h *oaHeader) *oaHeader {
	t.Helper()
	if h != nil && h.Ref != "" {
		name, ok := strings.CutPrefix(h.Ref, "#/components/headers/")
		if !ok || d.Components.Headers[name] == nil {
			t.Fatalf("openapi.json: $ref %q names no header", h.Ref)
		}
		return d.Components.Headers[name]
	}
	return h
}

// The node's routes are the document's paths and methods, no more and no
// fewer, and the node serves the document, without a token, as it is in
// the repository.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	d := loadOpenAPI(t)
	n := newNode(t, t.TempDir(), oneshot(t), node.Config{Security: node.Security{Token: "secret"}})
	defer n.Close(context.Background())
	var documented []string
	for p := range d.operations(t) {
		documented = append(documented, p)
	}
	served := node.RoutePatterns(n)
	sort.Strings(documented)
	sort.Strings(served)
	for _, p := range served {
		if !slices.Contains(documented, p) {
			t.Errorf("the node serves %s; openapi.json does not document it", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(served, p) {
			t.Errorf("openapi.json documents %s; the node does not serve it", p)
		}
	}

	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || string(body) != string(node.OpenAPI) {
		t.Fatalf("GET /v1/openapi.json without a token: %d %s, %d bytes, want 200 and the document", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
}

// Every schema of the document is a Go type of the API, with the same
// JSON fields: the same names, the same JSON types, and a field required
// exactly when the Go field is always written (no omitempty).
func TestOpenAPISchemasAreTheResponseStructs(t *testing.T) {
	t.Parallel()
	d := loadOpenAPI(t)
	types := map[string]reflect.Type{
		"AlarmState":   reflect.TypeFor[node.AlarmState](),
		"FiredState":   reflect.TypeFor[node.FiredState](),
		"SetAlarmBody": reflect.TypeFor[node.SetAlarmBody](),
		"OfferBody":    reflect.TypeFor[node.OfferBody](),
		"OfferState":   reflect.TypeFor[node.OfferState](),
		"Readiness":    reflect.TypeFor[node.Readiness](),
		"Check":        reflect.TypeFor[node.Check](),
		"Problem":      reflect.TypeFor[node.Problem](),

		"DeadLetter":        reflect.TypeFor[node.DeadLetter](),
		"DeadLetterList":    reflect.TypeFor[node.DeadLetterList](),
		"AlarmEntry":        reflect.TypeFor[node.AlarmEntry](),
		"AlarmList":         reflect.TypeFor[node.AlarmList](),
		"DeadLetterSelect":  reflect.TypeFor[node.DeadLetterSelect](),
		"DeadLetterOutcome": reflect.TypeFor[node.DeadLetterOutcome](),
		"LetterResult":      reflect.TypeFor[node.LetterResult](),
	}
	for name := range d.Components.Schemas {
		if types[name] == nil {
			t.Errorf("openapi.json: schema %s is no type of the API", name)
		}
	}
	for name, typ := range types {
		s := d.Components.Schemas[name]
		if s == nil {
			t.Errorf("openapi.json: no schema %s for node.%s", name, typ.Name())
			continue
		}
		fields := map[string]bool{}
		for f := range typ.Fields() {
			tag := f.Tag.Get("json")
			jname, opts, _ := strings.Cut(tag, ",")
			if !f.IsExported() || jname == "-" {
				continue
			}
			if jname == "" {
				jname = f.Name
			}
			fields[jname] = true
			always := !strings.Contains(opts, "omitempty")
			p := s.Properties[jname]
			if p == nil {
				t.Errorf("%s.%s (json %q) is not in openapi.json's %s", typ.Name(), f.Name, jname, name)
				continue
			}
			if got := slices.Contains(s.Required, jname); got != always && name != "SetAlarmBody" && name != "DeadLetterSelect" {
				t.Errorf("%s: %q required %v in openapi.json, but the Go field is written %s", name, jname, got, map[bool]string{true: "always", false: "only when set (omitempty)"}[always])
			}
			if want := jsonType(f.Type, always); want != "" && !sameType(p.Type, want) {
				t.Errorf("%s: %q is type %v in openapi.json, want %s for Go %s", name, jname, p.Type, want, f.Type)
			}
			if f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct {
				if p.Ref != "#/components/schemas/"+f.Type.Elem().Name() {
					t.Errorf("%s: %q is %q in openapi.json, want a $ref to %s", name, jname, p.Ref, f.Type.Elem().Name())
				}
			}
		}
		for jname := range s.Properties {
			if !fields[jname] {
				t.Errorf("openapi.json's %s has %q, which node.%s does not write", name, jname, typ.Name())
			}
		}
	}
}

// jsonType is the JSON Schema type of a Go field's values: "integer",
// "string", "boolean", or with a pointer always written "integer|null".
// "" for a struct (a $ref).
func jsonType(t reflect.Type, always bool) string {
	null := ""
	if t.Kind() == reflect.Pointer {
		if always {
			null = "|null"
		}
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint64:
		return "integer" + null
	case reflect.String:
		return "string" + null
	case reflect.Bool:
		return "boolean" + null
	}
	return ""
}

func sameType(doc any, want string) bool {
	switch v := doc.(type) {
	case string:
		return v == want
	case []any:
		var s []string
		for _, x := range v {
			s = append(s, x.(string))
		}
		return strings.Join(s, "|") == want
	}
	return false
}

// Every status the document lists for a route is one a real node answers
// (on versitygw) for some request, and every answer of those requests is
// documented for its route, with the documented content type, required
// headers and JSON fields. The few statuses no test here can cause cheaply
// are listed, each with the test that causes it.
func TestOpenAPIStatusesAreTheHandlers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := loadOpenAPI(t)
	ops := d.operations(t)
	srv := s3test.Start(t)
	classes := map[string][]byte{
		"oneshot": testguest.Fixture(t, "oneshot_alarm"),
		"trap":    testguest.Fixture(t, "trap_on_request"),
		"f":       testguest.Fixture(t, "fail_on_alarm"),
	}
	sec := node.Security{Token: "op", TenantTokens: map[string]string{"t": "tt", "u": "ut"}}
	// Tenant z may send one request, and no other for days.
	limits := node.Admission{Tenants: map[string]node.TenantLimits{"z": {Rate: 1e-6, Burst: 1}}}
	a := serveHost(t, srv.Bucket, "a", classes, hostConfig{security: sec, failoverWait: -1, admission: limits,
		engine: []engine.Option{engine.WithMaxAttempts(1)}})
	// b holds an actor, and nobody can reach it: a answers 503 at once
	// (failoverWait -1) for it.
	b := startHost(t, srv.Bucket, "b", t.TempDir(), classes, hostConfig{addr: "127.0.0.1:1"})
	if _, err := b.Request(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "held"}, hourAhead()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Request(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "x"}, hourAhead()); err != nil {
		t.Fatal(err)
	}
	// An actor whose newest snapshot is not a database.
	statetest.Plant(t, srv.Bucket, "cluster/", abi.ActorID{Tenant: "t", Class: "oneshot", Name: "bad"}, 1<<40, []byte("not a database"))
	// A node whose bucket stopped answering: its lease lapses.
	var down atomic.Bool
	m := bucket.NewMem()
	m.Faults = func(bucket.Op) bucket.Fault {
		if down.Load() {
			return bucket.Fault{Err: errors.New("injected: connection refused")}
		}
		return bucket.Fault{}
	}
	lapsed := serveHost(t, m, "c", classes, hostConfig{ttl: time.Second, margin: 300 * time.Millisecond, grace: 300 * time.Millisecond})
	down.Store(true)
	waitFor(t, "c's lease to lapse", func() bool { status, _ := call(t, "GET", lapsed.URL+"/v1/healthz", nil); return status == 503 })
	// A node running alone: ready and live.
	alone := newNode(t, t.TempDir(), classes, node.Config{})
	defer alone.Close(ctx)
	aloneSrv := httptest.NewServer(alone.Handler())
	defer aloneSrv.Close()

	const (
		exec       = "POST /v1/actors/{tenant}/{class}/{name}"
		del        = "DELETE /v1/actors/{tenant}/{class}/{name}"
		getAlarm   = "GET /v1/actors/{tenant}/{class}/{name}/alarm"
		setAlarm   = "PUT /v1/actors/{tenant}/{class}/{name}/alarm"
		clearAlarm = "DELETE /v1/actors/{tenant}/{class}/{name}/alarm"
		fireAlarm  = "POST /v1/actors/{tenant}/{class}/{name}/alarm:fire"
		offer      = "POST /v1/actors/{tenant}/{class}/{name}/alarm:offer"
	)
	actorRoutes := []string{exec, del, getAlarm, setAlarm, clearAlarm, fireAlarm, offer}
	// url is the route's URL on the actor t/c/n of base.
	url := func(base, route, actor string) string {
		path := strings.SplitN(route, " ", 2)[1]
		return base + strings.Replace(path, "{tenant}/{class}/{name}", actor, 1)
	}
	setBody := `{"at_ms": 1900000000000}`
	offerBody := `{"at_ms": 1000}`
	body := func(route string) string {
		switch route {
		case setAlarm:
			return setBody
		case offer:
			return offerBody
		}
		return ""
	}
	type probe struct {
		route, url, token, body string
		want                    int
	}
	var probes []probe
	for _, r := range actorRoutes {
		probes = append(probes,
			probe{r, url(a.URL, r, "T/oneshot/x"), "op", body(r), 400},
			probe{r, url(a.URL, r, "t/oneshot/x"), "", body(r), 401},
			probe{r, url(a.URL, r, "u/oneshot/x"), "tt", body(r), 403},
			probe{r, url(a.URL, r, "t/nope/x"), "op", body(r), 404},
			probe{r, url(a.URL, r, "t/oneshot/held"), "tt", body(r), 503},
		)
		probes = append(probes, probe{r, url(a.URL, r, "t/oneshot/bad"), "op", body(r), 500})
	}
	probes = append(probes,
		probe{exec, url(a.URL, exec, "t/oneshot/x"), "tt", string(hourAhead()), 200},
		probe{exec, url(a.URL, exec, "t/oneshot/x") + "?kind=exec-durable", "op", string(hourAhead()), 200},
		probe{exec, url(a.URL, exec, "t/trap/x"), "op", "", 422},
		probe{getAlarm, url(a.URL, getAlarm, "t/oneshot/x"), "op", "", 200},
		probe{getAlarm, url(a.URL, getAlarm, "t/oneshot/never"), "op", "", 200},
		probe{setAlarm, url(a.URL, setAlarm, "t/oneshot/x"), "op", `{"at": "2030-01-01T00:00:00Z"}`, 200},
		probe{setAlarm, url(a.URL, setAlarm, "t/oneshot/never"), "op", setBody, 404},
		probe{clearAlarm, url(a.URL, clearAlarm, "t/oneshot/x") + "?if_at_ms=1", "op", "", 409},
		probe{clearAlarm, url(a.URL, clearAlarm, "t/oneshot/x"), "op", "", 200},
		probe{clearAlarm, url(a.URL, clearAlarm, "t/oneshot/never"), "op", "", 404},
		probe{fireAlarm, url(a.URL, fireAlarm, "t/oneshot/x"), "op", "", 200},
		probe{fireAlarm, url(a.URL, fireAlarm, "t/oneshot/never"), "op", "", 404},
		probe{offer, url(a.URL, offer, "t/oneshot/x"), "op", offerBody, 200},
		probe{offer, url(a.URL, offer, "t/oneshot/x"), "op", `{"at": "2030-01-01T00:00:00Z"}`, 400},
		probe{del, url(a.URL, del, "t/oneshot/x"), "op", "", 204},
		probe{"GET /v1/healthz", aloneSrv.URL + "/v1/healthz", "", "", 200},
		probe{"GET /v1/healthz", lapsed.URL + "/v1/healthz", "", "", 503},
		probe{"GET /v1/readyz", aloneSrv.URL + "/v1/readyz", "", "", 200},
		probe{"GET /v1/readyz", a.URL + "/v1/readyz", "", "", 503}, // no sweep yet
		probe{"GET /v1/openapi.json", a.URL + "/v1/openapi.json", "", "", 200},
		probe{exec, url(a.URL, exec, "z/oneshot/x"), "op", string(hourAhead()), 200},
	)
	// The tenant's routes: a dead letter to list, redrive and acknowledge
	// (an actor of a class allowed one attempt), and the alarms.
	const (
		listAlarms  = "GET /v1/tenants/{tenant}/alarms"
		listLetters = "GET /v1/tenants/{tenant}/dead-letters"
		redrive     = "POST /v1/tenants/{tenant}/dead-letters:redrive"
		acknowledge = "POST /v1/tenants/{tenant}/dead-letters:acknowledge"
	)
	tenantRoutes := []string{listAlarms, listLetters, redrive, acknowledge}
	turl := func(base, route, tenant string) string {
		return base + strings.Replace(strings.SplitN(route, " ", 2)[1], "{tenant}", tenant, 1)
	}
	poison := abi.ActorID{Tenant: "t", Class: "f", Name: "poison"}
	if _, err := a.Request(ctx, poison, nil); err != nil { // its alarm at 1000 ms
		t.Fatal(err)
	}
	if f, err := a.FireAlarm(ctx, poison); err != nil || !f.GaveUp {
		t.Fatalf("firing the poison alarm: %+v, %v; want its only attempt failed", f, err)
	}
	all := `{"all": true}`
	for _, r := range tenantRoutes {
		b := ""
		if r == redrive || r == acknowledge {
			b = all
		}
		probes = append(probes,
			probe{r, turl(a.URL, r, "T"), "op", b, 400},
			probe{r, turl(a.URL, r, "t"), "", b, 401},
			probe{r, turl(a.URL, r, "u"), "tt", b, 403},
			probe{r, turl(lapsed.URL, r, "t"), "", b, 503},
			probe{r, turl(a.URL, r, "z"), "op", b, 429},
		)
	}
	probes = append(probes,
		probe{listAlarms, turl(a.URL, listAlarms, "t") + "?due_before_ms=1900000000000&limit=1", "tt", "", 200},
		probe{listAlarms, turl(a.URL, listAlarms, "t") + "?due_after_ms=x", "tt", "", 400},
		probe{listLetters, turl(a.URL, listLetters, "t"), "tt", "", 200},
		probe{listLetters, turl(a.URL, listLetters, "t") + "?cursor=!", "tt", "", 400},
		probe{getAlarm, url(a.URL, getAlarm, "t/f/poison"), "tt", "", 200},
		probe{redrive, turl(a.URL, redrive, "t"), "tt", `{"all": true, "dry_run": true}`, 200},
		probe{redrive, turl(a.URL, redrive, "t"), "tt", `{}`, 400},
		probe{acknowledge, turl(a.URL, acknowledge, "t"), "tt", `{"class": "f", "name": "poison"}`, 200},
		probe{acknowledge, turl(a.URL, acknowledge, "t"), "tt", `{"class": "f", "name": "poison"}`, 404},
		probe{redrive, turl(a.URL, redrive, "t"), "tt", `{"class": "f", "name": "poison"}`, 404},
	)
	for _, r := range actorRoutes {
		if r != offer { // a node's own call: no limit
			probes = append(probes, probe{r, url(a.URL, r, "z/oneshot/x"), "op", body(r), 429})
		}
	}
	// Statuses documented but not caused here, and the test that causes
	// each.
	elsewhere := map[string]string{
		"* 507": "a full data directory: TestAFullDataDirectoryAnswers507AndResumes",
	}

	caused := map[string]bool{}
	for _, p := range probes {
		op := ops[p.route]
		if op == nil {
			t.Fatalf("probe of %s: not in openapi.json", p.route)
		}
		method := strings.SplitN(p.route, " ", 2)[0]
		req, err := http.NewRequest(method, p.url, strings.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		if p.token != "" {
			req.Header.Set("Authorization", "Bearer "+p.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		what := method + " " + strings.TrimPrefix(p.url, "http://") + " (" + p.route + ")"
		if resp.StatusCode != p.want {
			t.Errorf("%s: %d %s, want %d", what, resp.StatusCode, out, p.want)
			continue
		}
		status := strconv.Itoa(resp.StatusCode)
		caused[p.route+" "+status] = true
		doc := d.response(t, op.Responses[status])
		if doc == nil {
			t.Errorf("%s: answered %d, which openapi.json does not list for %s", what, resp.StatusCode, p.route)
			continue
		}
		checkAnswer(t, d, what, doc, resp.Header, out)
	}
	for route, op := range ops {
		for status := range op.Responses {
			key := route + " " + status
			if caused[key] {
				if elsewhere[key] != "" {
					t.Errorf("%s is caused here and listed as caused elsewhere", key)
				}
				continue
			}
			if elsewhere[key] == "" && (elsewhere["* "+status] == "" || !slices.Contains(actorRoutes, route)) {
				t.Errorf("openapi.json lists %s, which no request here caused", key)
			}
		}
	}
	for key := range elsewhere {
		if route, status, ok := cutStatus(key); ok && (ops[route] == nil || ops[route].Responses[status] == nil) {
			t.Errorf("%s is listed as caused elsewhere, but openapi.json does not list it", key)
		}
	}
}

// cutStatus splits "METHOD /path STATUS"; ok is false for "* STATUS".
func cutStatus(key string) (route, status string, ok bool) {
	i := strings.LastIndex(key, " ")
	route, status = key[:i], key[i+1:]
	return route, status, route != "*"
}

// checkAnswer checks an answer against its documented response: its
// content type, its required headers (a Retry-After of whole seconds),
// and for JSON the fields of the schema (no other, and the required ones).
func checkAnswer(t *testing.T, d *oaDoc, what string, doc *oaResponse, h http.Header, body []byte) {
	t.Helper()
	for name, hd := range doc.Headers {
		hd = d.header(t, hd)
		v := h.Get(name)
		if hd.Required && v == "" {
			t.Errorf("%s: no %s header, which openapi.json requires", what, name)
		}
		if name == "Retry-After" && v != "" {
			if s, err := strconv.Atoi(v); err != nil || s < 1 {
				t.Errorf("%s: Retry-After %q, want whole seconds, at least 1", what, v)
			}
		}
	}
	if len(doc.Content) == 0 {
		if len(body) != 0 {
			t.Errorf("%s: a body (%q) where openapi.json documents none", what, body)
		}
		return
	}
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	content, ok := doc.Content[mt]
	if err != nil || !ok {
		t.Errorf("%s: Content-Type %q, openapi.json documents %v", what, h.Get("Content-Type"), keys(doc.Content))
		return
	}
	if mt != "application/json" && mt != "application/problem+json" {
		return
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("%s: %q is not JSON: %v", what, body, err)
		return
	}
	checkJSON(t, d, what, d.schema(t, content.Schema), v)
}

func checkJSON(t *testing.T, d *oaDoc, what string, s *oaSchema, v any) {
	t.Helper()
	if list, ok := v.([]any); ok && s.Items != nil {
		for i, x := range list {
			checkJSON(t, d, fmt.Sprintf("%s[%d]", what, i), d.schema(t, s.Items), x)
		}
		return
	}
	obj, ok := v.(map[string]any)
	if !ok || s.Properties == nil {
		return
	}
	for _, r := range s.Required {
		if _, ok := obj[r]; !ok {
			t.Errorf("%s: no %q, which openapi.json requires", what, r)
		}
	}
	for k, x := range obj {
		p := s.Properties[k]
		if p == nil {
			t.Errorf("%s: field %q, which openapi.json does not document", what, k)
			continue
		}
		checkJSON(t, d, what+"."+k, d.schema(t, p), x)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// docs/http-api.md, the API's reference for people, has the document's
// routes in its table of routes and its codes in its table of errors.
func TestHTTPAPIReferenceIsTheOpenAPI(t *testing.T) {
	t.Parallel()
	d := loadOpenAPI(t)
	md, err := os.ReadFile(filepath.Join(testguest.Root(t), "docs", "http-api.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := func(title string) string {
		_, rest, ok := strings.Cut(string(md), "\n## "+title+"\n")
		if !ok {
			t.Fatalf("docs/http-api.md has no section %q", title)
		}
		rest, _, _ = strings.Cut(rest, "\n## ")
		return rest
	}
	// The first cell of each row of the section's tables.
	firstCells := func(text string) []string {
		var out []string
		for line := range strings.Lines(text) {
			if cells := strings.Split(line, "|"); len(cells) > 2 && strings.HasPrefix(line, "| `") {
				out = append(out, strings.TrimSpace(cells[1]))
			}
		}
		return out
	}
	var routes []string
	for _, cell := range firstCells(section("Routes")) {
		route := strings.Trim(cell, "`")
		if method, path, ok := strings.Cut(route, " "); ok && strings.HasPrefix(path, "/v1/") {
			path, _, _ = strings.Cut(path, "?")
			routes = append(routes, method+" "+path)
		}
	}
	var ops []string
	for op := range d.operations(t) {
		ops = append(ops, op)
	}
	sort.Strings(routes)
	sort.Strings(ops)
	if !slices.Equal(routes, ops) {
		t.Errorf("docs/http-api.md's routes:\n%v\nopenapi.json's:\n%v", routes, ops)
	}
	var codes []string
	for _, cell := range firstCells(section("Errors")) {
		for _, c := range strings.Split(cell, ",") {
			codes = append(codes, strings.Trim(strings.TrimSpace(c), "`"))
		}
	}
	var enum struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Problem"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(node.OpenAPI, &enum); err != nil {
		t.Fatal(err)
	}
	want := enum.Components.Schemas.Problem.Properties.Code.Enum
	sort.Strings(codes)
	sort.Strings(want)
	if !slices.Equal(codes, want) {
		t.Errorf("docs/http-api.md's codes %v; openapi.json's %v", codes, want)
	}

	// The alarm bodies' limit, which the node holds
	// (TestAlarmCallsRefuseBadInput), is stated in both.
	var raw struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Responses map[string]struct {
				Description string `json:"description"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(node.OpenAPI, &raw); err != nil {
		t.Fatal(err)
	}
	limit := fmt.Sprintf("at most %d KiB", node.MaxAlarmBody/1024)
	for _, r := range []struct{ path, method string }{
		{"/v1/actors/{tenant}/{class}/{name}/alarm", "put"},
		{"/v1/actors/{tenant}/{class}/{name}/alarm:offer", "post"},
	} {
		var op struct {
			RequestBody struct {
				Description string `json:"description"`
			} `json:"requestBody"`
		}
		if err := json.Unmarshal(raw.Paths[r.path][r.method], &op); err != nil {
			t.Fatalf("openapi.json: %s %s: %v", r.method, r.path, err)
		}
		if d := op.RequestBody.Description; !strings.Contains(d, limit) {
			t.Errorf("openapi.json: the body of %s %s: %q does not say %q", r.method, r.path, d, limit)
		}
	}
	var putRow, notFoundRow string
	for line := range strings.Lines(string(md)) {
		switch {
		case strings.HasPrefix(line, "| `PUT /v1/actors/{tenant}/{class}/{name}/alarm`"):
			putRow = line
		case strings.HasPrefix(line, "| `not_found`"):
			notFoundRow = line
		}
	}
	if !strings.Contains(putRow, limit) {
		t.Errorf("docs/http-api.md's row of PUT .../alarm does not say %q: %q", limit, putRow)
	}
	// A GET of the alarm of an actor that does not exist is 200 with from
	// none, which the client and keepctl alarms delete rely on
	// (TestOpenAPIStatusesAreTheHandlers causes it); only the calls that
	// change the alarm are 404. Both references say so.
	for what, text := range map[string]string{
		"docs/http-api.md's not_found row":    notFoundRow,
		"openapi.json's NotFound description": raw.Components.Responses["NotFound"].Description,
	} {
		if !strings.Contains(text, "setting, clearing or firing") || !strings.Contains(text, "200") {
			t.Errorf("%s does not say that only setting, clearing or firing a missing actor's alarm is a 404, and a GET is 200: %q", what, text)
		}
	}
}

// The codes of node/problem.go are the document's, no more, no fewer.
func TestOpenAPICodesAreTheNodes(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(testguest.Root(t), "node", "problem.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(name.Name, "Code") && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					codes = append(codes, v)
				}
			}
		}
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Problem"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(node.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	want := doc.Components.Schemas.Problem.Properties.Code.Enum
	sort.Strings(codes)
	sort.Strings(want)
	if len(codes) == 0 || !slices.Equal(codes, want) {
		t.Errorf("node/problem.go's codes %v; openapi.json's %v", codes, want)
	}
}
