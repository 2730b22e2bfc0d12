package node

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/hostmod"
)

// The tenant's routes: its alarms (the index) and its dead letters,
// listed without S3 credentials on the client, and the dead letters
// redriven or acknowledged.
//
//	GET  /v1/tenants/{tenant}/alarms[?class=C&due_after_ms=N&due_before_ms=N&limit=N&cursor=X]
//	GET  /v1/tenants/{tenant}/dead-letters[?class=C&limit=N&cursor=X]
//	POST /v1/tenants/{tenant}/dead-letters:redrive       {"class": C, "name": N} | {"class": C} | {"all": true}, "dry_run"
//	POST /v1/tenants/{tenant}/dead-letters:acknowledge   the same body

// DefaultListLimit and MaxListLimit are the page sizes of the tenant's
// lists (limit=N).
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// maxScanned bounds the index keys one page of GET …/alarms reads when a
// filter skips them: the page ends there, with a cursor.
const maxScanned = 10 * MaxListLimit

// AlarmEntry is one alarm of GET /v1/tenants/{tenant}/alarms: an entry
// of the alarm index (or, on a node running alone, of its timer).
type AlarmEntry struct {
	Tenant string `json:"tenant"`
	Class  string `json:"class"`
	// Name is the actor's name; NameHex the same bytes in hex when the
	// name is not UTF-8.
	Name    string `json:"name"`
	NameHex string `json:"name_hex,omitempty"`
	// DueMs is the entry's time (Unix ms), Due the same in RFC 3339.
	DueMs int64  `json:"due_ms"`
	Due   string `json:"due"`
}

// AlarmList is the answer of GET /v1/tenants/{tenant}/alarms.
type AlarmList struct {
	Alarms []AlarmEntry `json:"alarms"`
	// NextCursor, when set, gives the next page (cursor=); absent on the
	// last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// DeadLetterList is the answer of GET /v1/tenants/{tenant}/dead-letters.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

// DeadLetterSelect is the body of POST …/dead-letters:redrive and
// …:acknowledge: one actor (Class and Name), one class (Class), or every
// dead letter of the tenant (All); with DryRun, only what would be done
// is answered.
type DeadLetterSelect struct {
	Class  string `json:"class,omitempty"`
	Name   string `json:"name,omitempty"`
	All    bool   `json:"all,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
	// Limit is the most dead letters one call handles (default and at
	// most MaxListLimit); Outcome.More says there are more.
	Limit int `json:"limit,omitempty"`
}

// DeadLetterOutcome is the answer of a redrive or an acknowledgement.
type DeadLetterOutcome struct {
	DryRun bool `json:"dry_run"`
	// Matched is how many dead letters the body selected (in this call);
	// Done how many were redriven or acknowledged (in a dry run: would
	// be); Failed how many could not be.
	Matched int `json:"matched"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	// More says the selection had more dead letters than the call's
	// limit: call again.
	More   bool           `json:"more"`
	Actors []LetterResult `json:"actors"`
}

// LetterResult is what was done to one actor's dead letter: Result is
// redriven, acknowledged, would_redrive, would_acknowledge or failed;
// Detail why it failed (or, acknowledged, that a newer dead letter
// replaced the one read, and stays listed); AlarmMs the alarm a redrive
// set.
type LetterResult struct {
	Tenant  string `json:"tenant"`
	Class   string `json:"class"`
	Name    string `json:"name"`
	NameHex string `json:"name_hex,omitempty"`
	Result  string `json:"result"`
	AlarmMs *int64 `json:"alarm_ms,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

func tenantFrom(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := r.PathValue("tenant")
	traceTenant(r, t)
	if err := abi.ValidateTenant(t); err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return "", false
	}
	return t, true
}

// listQuery reads the class, limit and cursor of a list.
func listQuery(tenant string, q url.Values) (class string, limit int, cursor string, err error) {
	if class = q.Get("class"); class != "" {
		if err := abi.ValidateClass(class); err != nil {
			return "", 0, "", err
		}
	}
	limit = DefaultListLimit
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > MaxListLimit {
			return "", 0, "", fmt.Errorf("limit %q is not 1 to %d", v, MaxListLimit)
		}
	}
	if v := q.Get("cursor"); v != "" {
		b, derr := base64.RawURLEncoding.DecodeString(v)
		if derr != nil || !utf8.Valid(b) || !strings.HasPrefix(string(b), tenant+"/") {
			return "", 0, "", fmt.Errorf("cursor %q is not one this list gave (next_cursor) for tenant %s", v, tenant)
		}
		cursor = string(b)
	}
	return class, limit, cursor, nil
}

func encodeCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// listFailed answers a list that could not be read from the bucket.
func (n *Node) listFailed(w http.ResponseWriter, err error) {
	code, retry := codeOf(err), "1"
	if code == CodeNewerFormat {
		retry = n.newerRetryAfter()
	}
	w.Header().Set("Retry-After", retry)
	writeProblem(w, http.StatusServiceUnavailable, code, err.Error())
}

func (n *Node) handleListDeadLetters(w http.ResponseWriter, r *http.Request) {
	tenant, ok := tenantFrom(w, r)
	if !ok {
		return
	}
	class, limit, cursor, err := listQuery(tenant, r.URL.Query())
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("tenant %s: list dead letters: %v", tenant, err))
		return
	}
	after := ""
	if cursor != "" {
		after = letterRoot + cursor
	}
	list, next, err := n.listLetters(r.Context(), tenant, class, after, limit)
	if err != nil {
		n.listFailed(w, err)
		return
	}
	out := DeadLetterList{DeadLetters: list}
	if out.DeadLetters == nil {
		out.DeadLetters = []DeadLetter{}
	}
	if next != "" {
		out.NextCursor = encodeCursor(strings.TrimPrefix(next, letterRoot))
	}
	writeJSON(w, out)
}

func (n *Node) handleListAlarms(w http.ResponseWriter, r *http.Request) {
	tenant, ok := tenantFrom(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	class, limit, cursor, err := listQuery(tenant, q)
	var after, before int64 = 0, alarmindex.MaxDueMs
	for _, b := range []struct {
		name string
		v    *int64
	}{{"due_after_ms", &after}, {"due_before_ms", &before}} {
		if s := q.Get(b.name); s != "" && err == nil {
			v, perr := strconv.ParseInt(s, 10, 64)
			if perr != nil || v < 0 || v > alarmindex.MaxDueMs {
				err = fmt.Errorf("%s %q is not Unix milliseconds 0 to %d", b.name, s, int64(alarmindex.MaxDueMs))
			}
			*b.v = v
		}
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("tenant %s: list alarms: %v", tenant, err))
		return
	}
	keep := func(id abi.ActorID, due int64) bool {
		return (class == "" || id.Class == class) && due >= after && due <= before
	}
	var out AlarmList
	if n.cfg.Cluster == nil {
		out = n.timerAlarms(tenant, cursor, limit, keep)
	} else {
		out, err = n.indexAlarms(r.Context(), tenant, cursor, after, before, limit, keep)
		if err != nil {
			n.listFailed(w, err)
			return
		}
	}
	if out.Alarms == nil {
		out.Alarms = []AlarmEntry{}
	}
	writeJSON(w, out)
}

func alarmEntry(id abi.ActorID, due int64) AlarmEntry {
	e := AlarmEntry{Tenant: id.Tenant, Class: id.Class, Name: id.Name, DueMs: due, Due: rfc3339ms(due)}
	if !utf8.ValidString(id.Name) {
		e.NameHex = id.NameHex()
	}
	return e
}

// indexAlarms lists the tenant's index entries due between after and
// before (in due order: the keys' order), those keep keeps, after the
// cursor (a key relative to alarms/).
func (n *Node) indexAlarms(ctx context.Context, tenant, cursor string, after, before int64, limit int, keep func(abi.ActorID, int64) bool) (AlarmList, error) {
	b := n.letters() // the bucket under the cluster prefix
	prefix := alarmindex.TenantPrefix(tenant)
	// The keys before the first due time: "alarms/<t>/<due>" sorts after
	// every key of an earlier time and before those of that time.
	start := strings.TrimSuffix(alarmindex.TimePrefix(tenant, after), "/")
	if cursor != "" && alarmindex.Root+cursor > start {
		start = alarmindex.Root + cursor
	}
	var out AlarmList
	scanned := 0
	for {
		keys, err := b.List(ctx, prefix, start, min(limit+1, MaxListLimit))
		if err != nil {
			return AlarmList{}, fmt.Errorf("tenant %s: list the alarm index: %w", tenant, err)
		}
		for _, k := range keys {
			key, err := alarmindex.ParseKey(k)
			if err != nil {
				n.log.Warn("not an index entry, skipped", "key", k, "error", err)
				start = k
				continue
			}
			if key.DueMs > before {
				return out, nil
			}
			if len(out.Alarms) == limit {
				out.NextCursor = encodeCursor(strings.TrimPrefix(start, alarmindex.Root))
				return out, nil
			}
			start = k
			scanned++
			if keep(key.Actor, key.DueMs) {
				out.Alarms = append(out.Alarms, alarmEntry(key.Actor, key.DueMs))
			}
		}
		if len(keys) < min(limit+1, MaxListLimit) {
			return out, nil
		}
		if scanned >= maxScanned {
			out.NextCursor = encodeCursor(strings.TrimPrefix(start, alarmindex.Root))
			return out, nil
		}
	}
}

// timerAlarms lists, on a node running alone, the tenant's alarms its
// timer holds (the committed alarm of each of its actors), in due order
// then actor order, after the cursor ("<tenant>/<due>/<class>/<name hex>").
func (n *Node) timerAlarms(tenant, cursor string, limit int, keep func(abi.ActorID, int64) bool) AlarmList {
	type item struct {
		sort string
		id   abi.ActorID
		at   int64
	}
	var items []item
	for key, at := range n.timer.Under(tenant + "/") {
		id, err := alarms.ParseTimerKey(key)
		if err != nil || !keep(id, at) {
			continue
		}
		s := fmt.Sprintf("%s/%015d/%s/%s", tenant, at, id.Class, id.NameHex())
		if s > cursor {
			items = append(items, item{s, id, at})
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].sort < items[j].sort })
	var out AlarmList
	for i, it := range items {
		if i == limit {
			out.NextCursor = encodeCursor(items[i-1].sort)
			break
		}
		out.Alarms = append(out.Alarms, alarmEntry(it.id, it.at))
	}
	return out
}

// parseSelect reads the body of a redrive or an acknowledgement.
func parseSelect(body []byte) (DeadLetterSelect, error) {
	var s DeadLetterSelect
	if len(body) > MaxAlarmBody {
		return s, fmt.Errorf("the body is over %d bytes", MaxAlarmBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf(`the body is not {"class": C, "name": N}, {"class": C} or {"all": true} (with "dry_run"): %v`, err)
	}
	if dec.More() {
		return s, errors.New("the body holds more than one JSON value")
	}
	switch {
	case s.Name != "" && s.Class == "":
		return s, errors.New(`"name" needs "class": the actor is {"class": C, "name": N}`)
	case s.All && s.Class != "":
		return s, errors.New(`give "all" or "class", not both`)
	case !s.All && s.Class == "":
		return s, errors.New(`say which dead letters: {"class": C, "name": N} for one actor, {"class": C} for a class, {"all": true} for every one of the tenant`)
	case s.Limit < 0 || s.Limit > MaxListLimit:
		return s, fmt.Errorf(`"limit" %d is not 1 to %d`, s.Limit, MaxListLimit)
	}
	if s.Class != "" {
		if err := abi.ValidateClass(s.Class); err != nil {
			return s, err
		}
	}
	if s.Limit == 0 {
		s.Limit = MaxListLimit
	}
	return s, nil
}

func (n *Node) handleRedrive(w http.ResponseWriter, r *http.Request) {
	n.handleLetters(w, r, "redrive")
}

func (n *Node) handleAcknowledge(w http.ResponseWriter, r *http.Request) {
	n.handleLetters(w, r, "acknowledge")
}

// handleLetters redrives or acknowledges the dead letters the body
// selects, one actor at a time.
func (n *Node) handleLetters(w http.ResponseWriter, r *http.Request, verb string) {
	tenant, ok := tenantFrom(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxAlarmBody+1))
	if err == nil {
		var s DeadLetterSelect
		if s, err = parseSelect(body); err == nil {
			n.doLetters(w, r, tenant, verb, s)
			return
		}
	}
	writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("tenant %s: %s dead letters: %v", tenant, verb, err))
}

func (n *Node) doLetters(w http.ResponseWriter, r *http.Request, tenant, verb string, s DeadLetterSelect) {
	out, f := n.runLetters(r, tenant, verb, s)
	if f != nil {
		if f.status == http.StatusServiceUnavailable {
			retry := "1"
			if f.code == CodeNewerFormat {
				retry = n.newerRetryAfter()
			}
			w.Header().Set("Retry-After", retry)
		}
		writeProblem(w, f.status, f.code, f.err.Error())
		return
	}
	writeJSON(w, out)
}

// lettersFailure is why a redrive or an acknowledgement did nothing: the
// status and code of its answer, and the cause.
type lettersFailure struct {
	status int
	code   string
	err    error
}

// runLetters redrives or acknowledges the dead letters s selects, one
// actor at a time: the API's and the console's (console.go) redrive.
func (n *Node) runLetters(r *http.Request, tenant, verb string, s DeadLetterSelect) (DeadLetterOutcome, *lettersFailure) {
	ctx := r.Context()
	var letters []DeadLetter
	more := false
	if h := r.Header.Get(letterHeader); h != "" && s.Name != "" && verb == "acknowledge" && r.Header.Get(forwardedHeader) != "" {
		// Forwarded by a node that read the record, to this node as the
		// actor's holder: what is acknowledged is the dead letter it read,
		// not what the record holds by now.
		dl, err := parseLetterHeader(tenant, s.Class, h)
		if err != nil {
			return DeadLetterOutcome{}, &lettersFailure{http.StatusBadRequest, CodeBadRequest, err}
		}
		letters = []DeadLetter{dl}
	} else if s.Name != "" {
		id := abi.ActorID{Tenant: tenant, Class: s.Class, Name: s.Name}
		if err := id.Validate(); err != nil {
			return DeadLetterOutcome{}, &lettersFailure{http.StatusBadRequest, CodeBadRequest, err}
		}
		dl, ok, err := n.readLetter(ctx, id)
		if err != nil {
			return DeadLetterOutcome{}, &lettersFailure{http.StatusServiceUnavailable, codeOf(err), err}
		}
		if !ok {
			return DeadLetterOutcome{}, &lettersFailure{http.StatusNotFound, CodeNotFound, fmt.Errorf("actor %s: %s: no dead letter (none was kept, or it was redriven, acknowledged, or its alarm set again)", id, verb)}
		}
		letters = []DeadLetter{dl}
	} else {
		var next string
		var err error
		if letters, next, err = n.listLetters(ctx, tenant, s.Class, "", s.Limit); err != nil {
			return DeadLetterOutcome{}, &lettersFailure{http.StatusServiceUnavailable, codeOf(err), err}
		}
		more = next != ""
	}
	out := DeadLetterOutcome{DryRun: s.DryRun, Matched: len(letters), More: more, Actors: []LetterResult{}}
	for _, dl := range letters {
		id := abi.ActorID{Tenant: dl.Tenant, Class: dl.Class, Name: dl.Name}
		res := LetterResult{Tenant: dl.Tenant, Class: dl.Class, Name: dl.Name, NameHex: dl.NameHex}
		var err error
		switch {
		case s.DryRun:
			res.Result = "would_" + verb
		case verb == "acknowledge":
			if res.Detail, err = n.acknowledge(ctx, r, id, dl); err == nil {
				res.Result = "acknowledged"
			}
		default:
			var at int64
			if at, err = n.redrive(ctx, r, id); err == nil {
				res.Result, res.AlarmMs = "redriven", &at
			}
		}
		if err != nil {
			res.Result, res.Detail = "failed", fmt.Sprintf("actor %s: %s: %v", id, verb, err)
			out.Failed++
		} else {
			out.Done++
		}
		out.Actors = append(out.Actors, res)
	}
	return out, nil
}

// redrive sets the actor's alarm to now, with a fresh retry budget (the
// retry count back to 0), by its holder: here, or forwarded to the node
// that holds it as PUT …/alarm. The holder deletes the dead letter's
// record under the actor's lock once the alarm is set (hostAlarm).
func (n *Node) redrive(ctx context.Context, r *http.Request, id abi.ActorID) (int64, error) {
	at := n.cfg.Clock.Now().UnixMilli()
	_, err := n.SetAlarm(ctx, id, at)
	var held *cluster.HeldElsewhereError
	if !errors.As(err, &held) || held.Addr == "" || r.Header.Get(forwardedHeader) != "" {
		return at, err
	}
	// Another node holds the actor: it sets the alarm (the call a client
	// would make, forwarded once).
	u := url.URL{Scheme: n.sec.scheme, Host: held.Addr,
		Path:    "/v1/actors/" + id.Tenant + "/" + id.Class + "/" + id.Name + "/alarm",
		RawPath: "/v1/actors/" + url.PathEscape(id.Tenant) + "/" + url.PathEscape(id.Class) + "/" + url.PathEscape(id.Name) + "/alarm"}
	_, err = n.toHolder(ctx, r, held, http.MethodPut, u, []byte(fmt.Sprintf(`{"at_ms": %d}`, at)), nil)
	return at, err
}

// letterHeader carries, on an acknowledgement forwarded to the actor's
// holder, the dead letter the forwarding node read: "<name as hex>
// <scheduled_ms> <failed_ms> <attempts>". The holder acknowledges that
// one (ackLetter), and takes the name from here: the body's JSON cannot
// carry a name that is not UTF-8.
const letterHeader = "Wasmkeep-Dead-Letter"

// parseLetterHeader reads the dead letter of letterHeader h, of an actor
// of the tenant and class.
func parseLetterHeader(tenant, class, h string) (DeadLetter, error) {
	f := strings.Fields(h)
	bad := fmt.Errorf("%s %q is not <name as hex> <scheduled_ms> <failed_ms> <attempts>", letterHeader, h)
	if len(f) != 4 {
		return DeadLetter{}, bad
	}
	name, err := abi.DecodeNameHex(f[0])
	if err != nil {
		return DeadLetter{}, bad
	}
	var n [3]int64
	for i, s := range f[1:] {
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return DeadLetter{}, bad
		}
	}
	id := abi.ActorID{Tenant: tenant, Class: class, Name: name}
	if err := id.Validate(); err != nil {
		return DeadLetter{}, err
	}
	return deadLetterOf(id, hostmod.DeadLetter{Scheduled: n[0], FailedAt: n[1], Attempts: int(n[2])}), nil
}

// acknowledge acknowledges dl, the actor's dead letter as this node read
// it, by the actor's holder under its lock (ackLetter): here, or forwarded
// to the node that holds it with dl in letterHeader. An acknowledgement
// without the lock could delete the record of a dead letter kept while it
// ran. detail, when not empty, says that a newer dead letter replaced dl
// and stays listed.
func (n *Node) acknowledge(ctx context.Context, r *http.Request, id abi.ActorID, dl DeadLetter) (detail string, err error) {
	err = n.withActor(ctx, id, "acknowledge dead letter", func(e *entry) error {
		var err error
		detail, err = n.ackLetter(ctx, e, dl)
		return err
	})
	var held *cluster.HeldElsewhereError
	if !errors.As(err, &held) || held.Addr == "" || r.Header.Get(forwardedHeader) != "" {
		return detail, err
	}
	u := url.URL{Scheme: n.sec.scheme, Host: held.Addr,
		Path:    "/v1/tenants/" + id.Tenant + "/dead-letters:acknowledge",
		RawPath: "/v1/tenants/" + url.PathEscape(id.Tenant) + "/dead-letters:acknowledge"}
	body, _ := json.Marshal(DeadLetterSelect{Class: id.Class, Name: id.Name})
	h := http.Header{}
	h.Set(letterHeader, fmt.Sprintf("%s %d %d %d", id.NameHex(), dl.ScheduledMs, dl.FailedMs, dl.Attempts))
	msg, err := n.toHolder(ctx, r, held, http.MethodPost, u, body, h)
	if err != nil {
		return "", err
	}
	var out DeadLetterOutcome
	if err := json.Unmarshal(msg, &out); err != nil || len(out.Actors) != 1 {
		return "", fmt.Errorf("the holder %s answered %s", held.NodeID, bytes.TrimSpace(msg))
	}
	if a := out.Actors[0]; a.Result != "acknowledged" {
		return "", fmt.Errorf("the holder %s: %s", held.NodeID, strings.TrimPrefix(a.Detail, fmt.Sprintf("actor %s: acknowledge: ", id)))
	}
	return out.Actors[0].Detail, nil
}

// toHolder sends a redrive's or an acknowledgement's call for one actor
// to its holder, which held names, as a call forwarded once with the
// caller's credentials, and returns the holder's answer (a 200's).
func (n *Node) toHolder(ctx context.Context, r *http.Request, held *cluster.HeldElsewhereError, method string, u url.URL, body []byte, h http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set(forwardedHeader, "1")
	req.Header.Set("Content-Type", "application/json")
	n.sec.forwardAuth(req, r)
	resp, err := n.sec.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("forward to the holder %s at %s: %w", held.NodeID, held.Addr, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var p Problem
		if json.Unmarshal(msg, &p) == nil && p.Detail != "" {
			return nil, fmt.Errorf("the holder %s answered %d (%s): %s", held.NodeID, resp.StatusCode, p.Code, p.Detail)
		}
		return nil, fmt.Errorf("the holder %s answered %d: %s", held.NodeID, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return msg, nil
}
