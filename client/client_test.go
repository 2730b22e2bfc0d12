package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

// serve starts a cluster node on srv's bucket, with its HTTP API on
// 127.0.0.1 (or addr, advertised but not listened on, when addr is set:
// a holder nobody can reach), and returns its URL.
func serve(t *testing.T, srv *s3test.Server, id, addr string, sec node.Security, failoverWait time.Duration) (*node.Node, string) {
	t.Helper()
	var ln net.Listener
	if addr == "" {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
	}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(),
		Classes: map[string][]byte{
			"oneshot": testguest.Fixture(t, "oneshot_alarm"),
			"trap":    testguest.Fixture(t, "trap_on_request"),
		},
		Logger:   hclog.NewNullLogger(),
		Security: sec,
		Cluster: &node.ClusterConfig{Bucket: srv.Bucket, NodeID: id, Addr: addr,
			LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second,
			IdleTimeout: time.Hour, SweepPeriod: time.Hour, FailoverWait: failoverWait},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(ctx) })
	if ln == nil {
		return n, ""
	}
	hs := &http.Server{Handler: n.Handler()}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return n, "http://" + addr
}

func at(ms int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(ms)) }

// The client against a real node on versitygw: each call does what the
// API says, and each refusal is a *client.Problem with the node's status,
// code, detail and Retry-After.
func TestClientCallsANode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := s3test.Start(t)
	sec := node.Security{Token: "op", TenantTokens: map[string]string{"t": "tenant-t"}}
	_, base := serve(t, srv, "n1", "", sec, -1)
	c, err := client.New(base, client.WithToken("op"))
	if err != nil {
		t.Fatal(err)
	}
	x := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a/b"} // a '/' in a name is escaped
	when := time.Date(2030, 3, 17, 17, 46, 40, 123e6, time.UTC)

	if st, err := c.Alarm(ctx, x); err != nil || st.From != "none" || st.AlarmMs != nil {
		t.Fatalf("Alarm of an actor that does not exist: %+v, %v; want from none and no alarm", st, err)
	}
	var p *client.Problem
	if _, err := c.SetAlarm(ctx, x, when); !errors.As(err, &p) || p.Status != 404 || p.Code != client.CodeNotFound || !strings.Contains(p.Detail, "t/oneshot/a/b") {
		t.Fatalf("SetAlarm of an actor that does not exist: %v; want a 404 not_found naming it", err)
	}
	if out, err := c.ExecDurable(ctx, x, at(when.UnixMilli())); err != nil || len(out) != 0 {
		t.Fatalf("ExecDurable: %q, %v", out, err)
	}
	st, err := c.Alarm(ctx, x)
	if got, ok := st.At(); err != nil || !ok || !got.Equal(when) || st.Alarm != "2030-03-17T17:46:40.123Z" || st.From != "holder" || st.Node != "n1" || st.RetryCount != 0 {
		t.Fatalf("Alarm after the request set it: %+v, %v; want %v from holder n1", st, err, when)
	}
	later := when.Add(time.Hour)
	if st, err := c.SetAlarm(ctx, x, later); err != nil || *st.AlarmMs != later.UnixMilli() {
		t.Fatalf("SetAlarm: %+v, %v", st, err)
	}
	if _, err := c.ClearAlarmAt(ctx, x, when.UnixMilli()); !client.IsCode(err, client.CodeAlarmMoved) || !errors.As(err, &p) || p.Status != 409 {
		t.Fatalf("ClearAlarmAt the old time: %v; want a 409 alarm_moved", err)
	}
	if st, err := c.ClearAlarmAt(ctx, x, later.UnixMilli()); err != nil || st.AlarmMs != nil {
		t.Fatalf("ClearAlarmAt its time: %+v, %v; want no alarm", st, err)
	}
	st, err = c.FireAlarm(ctx, x)
	if err != nil || st.Fired == nil || !st.Fired.Ran || st.Fired.Error != "" || st.Fired.Scheduled == "" || st.AlarmMs != nil {
		t.Fatalf("FireAlarm: %+v (fired %+v), %v; want on-alarm ran and no alarm left", st, st.Fired, err)
	}
	if _, err := c.ClearAlarm(ctx, x); err != nil {
		t.Fatalf("ClearAlarm: %v", err)
	}
	if err := c.Delete(ctx, x); err != nil {
		t.Fatalf("Delete: %v", err)
	}

	// Refusals.
	trap := abi.ActorID{Tenant: "t", Class: "trap", Name: "x"}
	if _, err := c.Exec(ctx, trap, nil); !errors.As(err, &p) || p.Status != 422 || p.Code != client.CodeGuestFailed || !strings.Contains(p.Detail, "t/trap/x") || p.Temporary() {
		t.Fatalf("Exec of a guest that traps: %v; want a 422 guest_failed naming the actor", err)
	}
	if _, err := c.Exec(ctx, abi.ActorID{Tenant: "t", Class: "nope", Name: "x"}, nil); !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("Exec of a class not served: %v; want not_found", err)
	}
	if _, err := c.Alarm(ctx, abi.ActorID{Tenant: "T", Class: "oneshot", Name: "x"}); !errors.Is(err, abi.ErrInvalidActorID) {
		t.Fatalf("Alarm of a malformed actor ID: %v; want abi.ErrInvalidActorID, before any call", err)
	}
	anon, _ := client.New(base)
	if _, err := anon.Alarm(ctx, x); !errors.As(err, &p) || p.Status != 401 || p.Code != client.CodeUnauthorized {
		t.Fatalf("without a token: %v; want 401 unauthorized", err)
	}
	tenant, _ := client.New(base, client.WithToken("tenant-t"))
	if _, err := tenant.Alarm(ctx, abi.ActorID{Tenant: "u", Class: "oneshot", Name: "x"}); !errors.As(err, &p) || p.Status != 403 || p.Code != client.CodeForbidden {
		t.Fatalf("a tenant's token on another tenant: %v; want 403 forbidden", err)
	}
	if err := anon.Health(ctx); err != nil {
		t.Fatalf("Health (no token needed): %v", err)
	}
	if r, err := anon.Ready(ctx); err != nil || r.Ready || r.Sweep == nil || r.Sweep.OK || r.Lease == nil || !r.Lease.OK {
		t.Fatalf("Ready before any sweep: %+v, %v; want not ready, the lease valid and the sweep check failed", r, err)
	}

	// A holder nobody can reach: a 503 with the failover's Retry-After
	// (3 s + 1 s + 1 s).
	holder, _ := serve(t, srv, "n2", "127.0.0.1:1", node.Security{Token: "op"}, 0)
	held := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "held"}
	if _, err := holder.Exec(ctx, held, at(when.UnixMilli()), node.Exec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, held, nil); !errors.As(err, &p) || !p.Temporary() || p.Code != client.CodeForwardFailed || p.RetryAfter < 4*time.Second || p.RetryAfter > 5*time.Second {
		t.Fatalf("Exec of an actor whose holder cannot be reached: %v (Retry-After %v); want a 503 forward_failed, Retry-After 4 to 5 s", err, p.RetryAfter)
	}
}

// WithTLS trusts the CA it is given, and New refuses a URL it cannot use.
func TestClientOverTLS(t *testing.T) {
	t.Parallel()
	n, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	srv := httptest.NewTLSServer(n.Handler())
	defer srv.Close()
	untrusted, _ := client.New(srv.URL)
	if err := untrusted.Health(t.Context()); err == nil {
		t.Fatal("a certificate signed by an unknown CA was accepted")
	}
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c, err := client.New(srv.URL, client.WithTLS(&tls.Config{RootCAs: pool}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(t.Context()); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	for _, bad := range []string{"127.0.0.1:7601", "ftp://h/", "http://", "http://h:1/?x=1"} {
		if _, err := client.New(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("New(%q): %v; want an error naming the URL", bad, err)
		}
	}
	if _, err := client.New(srv.URL, client.WithToken("two words")); err == nil {
		t.Error("a token with a space was accepted")
	}
}

// The client's types are the API's: their JSON fields are those of the
// schemas in node/openapi.json, and its codes those of the Problem
// schema.
func TestClientTypesAreTheOpenAPISchemas(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(node.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]reflect.Type{
		"AlarmState": reflect.TypeFor[client.AlarmState](),
		"FiredState": reflect.TypeFor[client.Fired](),
		"Readiness":  reflect.TypeFor[client.Readiness](),
		"Check":      reflect.TypeFor[client.Check](),

		"DeadLetter":        reflect.TypeFor[client.DeadLetter](),
		"DeadLetterList":    reflect.TypeFor[client.DeadLetterPage](),
		"AlarmEntry":        reflect.TypeFor[client.AlarmEntry](),
		"AlarmList":         reflect.TypeFor[client.AlarmPage](),
		"DeadLetterSelect":  reflect.TypeFor[client.DeadLetterSelect](),
		"DeadLetterOutcome": reflect.TypeFor[client.DeadLetterOutcome](),
		"LetterResult":      reflect.TypeFor[client.LetterResult](),
	} {
		var fields, documented []string
		for f := range typ.Fields() {
			jname, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, jname)
		}
		for p := range doc.Components.Schemas[name].Properties {
			documented = append(documented, p)
		}
		sort.Strings(fields)
		sort.Strings(documented)
		if !slices.Equal(fields, documented) {
			t.Errorf("client.%s has the fields %v; openapi.json's %s has %v", typ.Name(), fields, name, documented)
		}
	}
	codes := []string{client.CodeBadRequest, client.CodeUnauthorized, client.CodeForbidden, client.CodeNotFound, client.CodeMethod,
		client.CodeAlarmMoved, client.CodeGuestFailed, client.CodeInternal, client.CodeUnavailable, client.CodeLeaseNotValid,
		client.CodeHeldElsewhere, client.CodeForwardFailed, client.CodeBucketDown, client.CodeMemoryBusy, client.CodeDiskFull,
		client.CodeIdempotencyKeyReused, client.CodeThrottled, client.CodeNewerFormat}
	enum := doc.Components.Schemas["Problem"].Properties["code"].Enum
	sort.Strings(codes)
	sort.Strings(enum)
	if !slices.Equal(codes, enum) {
		t.Errorf("the client's codes %v; openapi.json's %v", codes, enum)
	}
}

// A program that calls a node links no engine, no SQLite and no S3
// client: the package imports the standard library and abi only.
func TestClientIsLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/wasmkeep/alarms/client").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	got := strings.Fields(string(out))
	if want := []string{"github.com/wasmkeep/alarms/abi", "github.com/wasmkeep/alarms/client"}; !slices.Equal(got, want) {
		t.Fatalf("the client depends on %v, want only %v", got, want)
	}
}

// Request events under an idempotency key: the second call under the key
// is answered from the record (Replayed), the key with another body is a
// 422 idempotency_key_reused, and a key the node would refuse is not sent.
func TestClientIdempotencyKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := s3test.Start(t)
	_, base := serve(t, srv, "n1", "", node.Security{}, -1)
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	x := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "k"}
	key := client.NewIdempotencyKey()
	if len(key) != 32 || key == client.NewIdempotencyKey() {
		t.Fatalf("NewIdempotencyKey: %q", key)
	}
	body := at(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	for i, want := range []bool{false, true, true} {
		replayed := !want
		exec := c.ExecDurable
		if i == 2 {
			exec = c.Exec
		}
		if _, err := exec(ctx, x, body, client.WithIdempotencyKey(key), client.Replayed(&replayed)); err != nil || replayed != want {
			t.Fatalf("call %d under the key: replayed %v, %v; want replayed %v", i, replayed, err, want)
		}
	}
	var p *client.Problem
	if _, err := c.ExecDurable(ctx, x, at(1), client.WithIdempotencyKey(key)); !errors.As(err, &p) || p.Status != 422 || p.Code != client.CodeIdempotencyKeyReused || p.Temporary() {
		t.Fatalf("the key with another body: %v; want a 422 %s", err, client.CodeIdempotencyKeyReused)
	}
	for _, bad := range []string{"", "a b", strings.Repeat("k", client.MaxIdempotencyKeyLen+1), "caf\u00e9"} {
		if _, err := c.Exec(ctx, x, body, client.WithIdempotencyKey(bad)); !errors.Is(err, client.ErrBadIdempotencyKey) {
			t.Errorf("key %q: %v, want ErrBadIdempotencyKey", bad, err)
		}
	}
}

// The client lists a tenant's dead letters and alarms, and redrives and
// acknowledges dead letters, on a node running alone: the dead letter of
// an actor whose only attempt failed is listed and shown by Alarm; a dry
// run changes nothing; an acknowledgement clears it.
func TestClientActsOnDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Classes: map[string][]byte{"f": testguest.Fixture(t, "fail_on_alarm")},
		Logger: hclog.NewNullLogger(), EngineOptions: []engine.Option{engine.WithMaxAttempts(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	id := abi.ActorID{Tenant: "t", Class: "f", Name: "poison"}
	if _, err := c.Exec(ctx, id, nil); err != nil { // its alarm at 1000 ms
		t.Fatal(err)
	}
	alarms, err := c.Alarms(ctx, "t", client.ListOptions{Class: "f", DueBeforeMs: 1000})
	if err != nil || len(alarms.Alarms) != 1 || alarms.Alarms[0].DueMs != 1000 || alarms.Alarms[0].Name != "poison" {
		t.Fatalf("Alarms: %+v, %v; want poison's at 1000", alarms, err)
	}
	if st, err := c.FireAlarm(ctx, id); err != nil || st.Fired == nil || !st.Fired.GaveUp {
		t.Fatalf("FireAlarm: %+v, %v; want its only attempt given up", st, err)
	}
	page, err := c.DeadLetters(ctx, "t", client.ListOptions{})
	if err != nil || len(page.DeadLetters) != 1 || page.DeadLetters[0].Actor() != id || page.DeadLetters[0].Attempts != 1 {
		t.Fatalf("DeadLetters: %+v, %v; want poison's", page, err)
	}
	if st, err := c.Alarm(ctx, id); err != nil || st.DeadLetter == nil || st.DeadLetter.Error == "" {
		t.Fatalf("Alarm: %+v, %v; want its dead letter", st, err)
	}
	out, err := c.RedriveDeadLetters(ctx, "t", client.DeadLetterSelect{All: true, DryRun: true})
	if err != nil || out.Matched != 1 || out.Actors[0].Result != "would_redrive" {
		t.Fatalf("a dry run: %+v, %v", out, err)
	}
	if out, err = c.AcknowledgeDeadLetters(ctx, "t", client.DeadLetterSelect{Class: "f", Name: "poison"}); err != nil || out.Done != 1 {
		t.Fatalf("AcknowledgeDeadLetters: %+v, %v", out, err)
	}
	if page, err = c.DeadLetters(ctx, "t", client.ListOptions{}); err != nil || len(page.DeadLetters) != 0 {
		t.Fatalf("after the acknowledgement: %+v, %v; want none", page, err)
	}
	_, err = c.RedriveDeadLetters(ctx, "t", client.DeadLetterSelect{Class: "f", Name: "poison"})
	if !client.IsCode(err, client.CodeNotFound) {
		t.Fatalf("redriving an acknowledged dead letter: %v; want not_found", err)
	}
}
