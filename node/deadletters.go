package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/hostmod"
)

// Dead letters, listed per tenant. An actor keeps its dead letter in its
// own database (hostmod.MetaAlarmDeadLetter), where finding one means
// reading every actor's state. So the node that gives an alarm up also
// writes a record of it, one object per actor:
//
//	<cluster prefix>dead-letters/<tenant>/<class>/<name as hex>
//
// in the bucket (on a node running alone, a file under
// <data dir>/_dead-letters/, a name no tenant can have). A tenant's dead
// letters are then one LIST of its folder. The record is written by the
// holder, under the actor's lock, once the delivery that gave up has
// committed (and, in a cluster, been uploaded); it is deleted, under the
// same lock, when the alarm is set again from outside (PUT …/alarm,
// alarm:fire, a redrive), when an event of the actor's own leaves an alarm,
// when the actor is deleted, and by an acknowledgement (by the holder too,
// ackLetter). The actor's own dead letter stays in its database as the
// history of the last alarm given up (keepctl actor inspect).

// letterRoot is the folder of the dead-letter records under the cluster
// prefix (or the data directory).
const letterRoot = "dead-letters/"

// letterDir is the folder of the records under a lone node's data
// directory: a leading '_' no tenant has, so no actor's files are there.
const letterDir = "_dead-letters"

// DeadLetter is one dead letter of GET /v1/tenants/{tenant}/dead-letters:
// the actor, and the alarm whose retries were given up.
type DeadLetter struct {
	Tenant string `json:"tenant"`
	Class  string `json:"class"`
	// Name is the actor's name; NameHex the same bytes in hex when the
	// name is not UTF-8 (Name then holds the bytes JSON could keep).
	Name    string `json:"name"`
	NameHex string `json:"name_hex,omitempty"`
	// ScheduledMs is the time the last attempt ran for (Unix ms), and
	// Scheduled the same in RFC 3339.
	ScheduledMs int64  `json:"scheduled_ms"`
	Scheduled   string `json:"scheduled"`
	// Attempts is how many runs in a row failed.
	Attempts int `json:"attempts"`
	// Error is the last attempt's error (at most 1 KiB of it).
	Error string `json:"error"`
	// FailedMs is when the last attempt failed and the retries were
	// given up (Unix ms), and Failed the same in RFC 3339.
	FailedMs int64  `json:"failed_ms"`
	Failed   string `json:"failed"`
}

// letterRecord is the body of a dead letter's record: its listed form,
// and the record's format version (format.DeadLetterVersion; none in
// records written before versions: version 1).
type letterRecord struct {
	Format int `json:"format"`
	DeadLetter
}

// deadLetterOf is the listed form of an actor's dead letter.
func deadLetterOf(id abi.ActorID, d hostmod.DeadLetter) DeadLetter {
	out := DeadLetter{Tenant: id.Tenant, Class: id.Class, Name: id.Name,
		ScheduledMs: d.Scheduled, Scheduled: rfc3339ms(d.Scheduled), Attempts: d.Attempts, Error: d.Error,
		FailedMs: d.FailedAt, Failed: rfc3339ms(d.FailedAt)}
	if !utf8.ValidString(id.Name) {
		out.NameHex = id.NameHex()
	}
	return out
}

// letterKey is the key of the actor's record, relative to the store.
func letterKey(id abi.ActorID) string { return letterRoot + id.Path() }

// letterPrefix is the folder of a tenant's records (and of one class's).
func letterPrefix(tenant, class string) string {
	if class == "" {
		return letterRoot + tenant + "/"
	}
	return letterRoot + tenant + "/" + class + "/"
}

// letterStore keeps the dead-letter records: the bucket under the cluster
// prefix, or a directory of a node running alone.
type letterStore interface {
	Get(ctx context.Context, key string) ([]byte, string, error)
	Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error)
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error)
}

// dirStore is a letterStore over a directory: a key is a file (with
// ".json"), written whole (a temporary file renamed).
type dirStore struct{ dir string }

func (d dirStore) path(key string) string {
	return filepath.Join(d.dir, filepath.FromSlash(strings.TrimPrefix(key, letterRoot))+".json")
}

func (d dirStore) Get(_ context.Context, key string) ([]byte, string, error) {
	b, err := os.ReadFile(d.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", &bucket.OpError{Bucket: d.dir, Op: bucket.OpGet, Key: key, Err: bucket.ErrNotFound}
	}
	return b, "", err
}

func (d dirStore) Put(_ context.Context, key string, body []byte, _ bucket.Cond) (string, error) {
	p := d.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		return "", err
	}
	return "", os.Rename(tmp, p)
}

func (d dirStore) Delete(_ context.Context, key string) error {
	if err := os.Remove(d.path(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (d dirStore) List(_ context.Context, prefix, startAfter string, limit int) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(d.dir, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.IsDir() || !strings.HasSuffix(p, ".json") {
			return nil
		}
		rel, _ := filepath.Rel(d.dir, p)
		key := letterRoot + strings.TrimSuffix(filepath.ToSlash(rel), ".json")
		if strings.HasPrefix(key, prefix) && key > startAfter {
			keys = append(keys, key)
		}
		return nil
	})
	sort.Strings(keys)
	return keys[:min(len(keys), limit)], err
}

// letters is the node's store of dead-letter records.
func (n *Node) letters() letterStore {
	if c := n.cfg.Cluster; c != nil {
		return bucket.WithPrefix(c.Bucket, c.Prefix)
	}
	return dirStore{dir: filepath.Join(n.cfg.DataDir, letterDir)}
}

// keepLetter writes the record of the dead letter the delivery d just
// committed (e.mu held). The dead letter itself is in the actor's
// database whatever happens here: a record that could not be written (the
// bucket's client has retried it) is logged at ERROR, and the actor is
// then found by keepctl alarms failed (its state in the bucket) rather
// than in the list.
func (n *Node) keepLetter(ctx context.Context, e *entry, d hostmod.Delivery) {
	dl, ok, err := e.a.DeadLetter(ctx)
	if err != nil || !ok {
		n.log.Error("the dead letter just kept cannot be read back: it is not listed", "actor", e.id.String(), "error", err)
		return
	}
	body, _ := json.Marshal(letterRecord{Format: format.DeadLetterVersion, DeadLetter: deadLetterOf(e.id, dl)})
	if _, err = n.letters().Put(ctx, letterKey(e.id), body, bucket.Cond{}); err == nil {
		e.letterChecked = false // a later event that sets an alarm deletes it
		return
	}
	n.log.Error("the record of a dead letter could not be written: it is not listed by GET /v1/tenants/{tenant}/dead-letters (keepctl alarms failed finds it in the bucket)",
		"actor", e.id.String(), "scheduled_ms", d.Scheduled, "error", err)
}

// dropLetter deletes the actor's dead-letter record (e.mu held): its alarm
// was set again, or it was acknowledged or deleted. Deleting a record that
// is not there is no error.
func (n *Node) dropLetter(ctx context.Context, id abi.ActorID) error {
	if err := n.letters().Delete(ctx, letterKey(id)); err != nil {
		return &abi.ActorError{ID: id, Op: "delete the dead letter's record", Err: err}
	}
	return nil
}

// ackLetter acknowledges dl, the dead letter of the open actor of e as a
// node read it from its record (e.mu held). The record's key is the
// actor's, reused by each dead letter: one kept since dl was read (the
// alarm set and given up again) has replaced dl's record, and deleting it
// would unlist a dead letter nobody saw. The record is written and deleted
// only under the actor's lock, by its holder, so it is dl's while the
// database's dead letter is dl, or none (a record whose deletion failed):
// only then is it deleted. Otherwise nothing is, and detail says that the
// newer dead letter stays listed.
func (n *Node) ackLetter(ctx context.Context, e *entry, dl DeadLetter) (detail string, err error) {
	d, ok, err := e.a.DeadLetter(ctx)
	if err != nil {
		return "", &abi.ActorError{ID: e.id, Op: "acknowledge the dead letter", Err: err}
	}
	if ok && !sameLetter(d, dl) {
		return fmt.Sprintf("the dead letter acknowledged (scheduled at %s, given up at %s) was replaced since by a newer one (scheduled at %s, given up at %s), which stays listed",
			rfc3339ms(dl.ScheduledMs), rfc3339ms(dl.FailedMs), rfc3339ms(d.Scheduled), rfc3339ms(d.FailedAt)), nil
	}
	return "", n.dropLetter(ctx, e.id)
}

// sameLetter reports whether the actor's dead letter d is the one listed
// as dl: the same alarm given up after the same attempts at the same
// time. Not its error: a record's JSON may have changed bytes of it that
// are not UTF-8.
func sameLetter(d hostmod.DeadLetter, dl DeadLetter) bool {
	return d.Scheduled == dl.ScheduledMs && d.FailedAt == dl.FailedMs && d.Attempts == dl.Attempts
}

// dropLetterOf deletes the dead-letter record of the open actor of e
// (e.mu held) when its database holds a dead letter; nothing otherwise.
func (n *Node) dropLetterOf(ctx context.Context, e *entry) error {
	if e.a == nil {
		return n.dropLetter(ctx, e.id)
	}
	_, ok, err := e.a.DeadLetter(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	return n.dropLetter(ctx, e.id)
}

// alarmSetAgain deletes the dead-letter record of an actor whose event
// left an alarm (e.mu held), once per hold, and only for an actor whose
// database holds a dead letter: other actors cost nothing.
func (n *Node) alarmSetAgain(ctx context.Context, e *entry, alarm *int64) {
	if alarm == nil || e.letterChecked {
		return
	}
	if err := n.dropLetterOf(ctx, e); err != nil {
		n.log.Warn("the alarm was set again, but the dead letter's record could not be deleted (it is deleted at the next event that sets the alarm)", "actor", e.id.String(), "error", err)
		return
	}
	e.letterChecked = true
}

// readLetter reads the actor's dead-letter record; ok is false when there
// is none. A record of a format newer than this build reads is not read:
// the error wraps a *format.NewerError (counted and logged).
func (n *Node) readLetter(ctx context.Context, id abi.ActorID) (DeadLetter, bool, error) {
	b, _, err := n.letters().Get(ctx, letterKey(id))
	if errors.Is(err, bucket.ErrNotFound) {
		return DeadLetter{}, false, nil
	}
	if err != nil {
		return DeadLetter{}, false, &abi.ActorError{ID: id, Op: "read the dead letter's record", Err: err}
	}
	if err := format.CheckJSON(format.DeadLetter, b); err != nil {
		if newer, ok := format.As(err); ok {
			n.newerLetters.Add(1)
			n.log.Warn("the actor's dead-letter record is of a format newer than this build reads; not read, left as it is",
				"actor", id.String(), "key", letterKey(id), "format", newer.Version, "known", newer.Known)
		}
		return DeadLetter{}, false, &abi.ActorError{ID: id, Op: "read the dead letter's record", Err: err}
	}
	var dl DeadLetter
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&dl); err != nil {
		return DeadLetter{}, false, &abi.ActorError{ID: id, Op: "read the dead letter's record", Err: fmt.Errorf("malformed record %q: %w", b, err)}
	}
	// The key names the actor; the body is what was given up.
	dl.Tenant, dl.Class, dl.Name, dl.NameHex = id.Tenant, id.Class, id.Name, ""
	if !utf8.ValidString(id.Name) {
		dl.NameHex = id.NameHex()
	}
	return dl, true, nil
}

// letterActor reads the actor of a record's key.
func letterActor(key string) (abi.ActorID, error) {
	return abi.ParsePath(strings.TrimPrefix(key, letterRoot))
}

// listLetters lists up to limit of the tenant's dead letters (of one
// class if class is set) after the key after, in key order. next is the
// key to list after for the rest ("" when there is no more).
func (n *Node) listLetters(ctx context.Context, tenant, class, after string, limit int) (out []DeadLetter, next string, err error) {
	prefix := letterPrefix(tenant, class)
	keys, err := n.letters().List(ctx, prefix, after, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("tenant %s: list the dead letters: %w", tenant, err)
	}
	more := len(keys) > limit
	keys = keys[:min(len(keys), limit)]
	for _, k := range keys {
		id, err := letterActor(k)
		if err != nil {
			n.log.Warn("not a dead letter's record, skipped", "key", k, "error", err)
			continue
		}
		dl, ok, err := n.readLetter(ctx, id)
		if errors.Is(err, format.ErrNewer) {
			continue // a later build's record, for a node that reads it (readLetter logged it)
		}
		if err != nil {
			return nil, "", err
		}
		if ok { // deleted since the LIST: fixed
			out = append(out, dl)
		}
	}
	if more && len(keys) > 0 {
		next = keys[len(keys)-1]
	}
	return out, next, nil
}
