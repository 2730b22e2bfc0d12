package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// Idempotency keys: a request event may carry a key (RequestOnce). The
// key, a digest of the request and the event's response are written into
// the event's own transaction, in the table _wasmkeep_idempotency of the
// actor's database, so they commit with the event's writes or not at all,
// and a replica of the database (a snapshot in the bucket) holds the key
// exactly when it holds the event. A request whose key is recorded runs
// nothing: it is answered with the recorded response.
//
// Retention is per actor: the latest DefaultIdempotencyKeys keys, and of
// those only as many, newest first, as keep their responses within
// DefaultIdempotencyBytes (the newest key is always kept, whatever its
// response's size). WithIdempotencyRetention changes both. A key evicted
// is unknown again: a request under it runs.
//
// The table is created by the first event that records a key, so an actor
// that never used one keeps the schema it had (and a host of an earlier
// version can still restore its snapshots).

// idemSchema creates the table of recorded keys. seq orders them (the
// oldest goes first); request is the SHA-256 of the request's body.
const idemSchema = `
CREATE TABLE IF NOT EXISTS _wasmkeep_idempotency (
	seq     INTEGER PRIMARY KEY,
	key     TEXT NOT NULL UNIQUE,
	request BLOB NOT NULL,
	reply   BLOB NOT NULL,
	at_ms   INTEGER NOT NULL
);`

var idemSchemaIn = strings.ReplaceAll(idemSchema, "CREATE TABLE IF NOT EXISTS ", "CREATE TABLE IF NOT EXISTS "+storeSchema+".")

// Retention defaults (WithIdempotencyRetention).
const (
	// DefaultIdempotencyKeys is how many keys an actor keeps.
	DefaultIdempotencyKeys = 128
	// DefaultIdempotencyBytes bounds the responses an actor keeps for
	// its keys, in bytes (the newest key's is kept whatever its size).
	DefaultIdempotencyBytes = 1 << 20
)

// MaxIdempotencyKeyLen is the longest idempotency key, in bytes.
const MaxIdempotencyKeyLen = 255

// ErrBadIdempotencyKey is wrapped by the error of ValidateIdempotencyKey:
// an empty key, one over MaxIdempotencyKeyLen bytes, or one with a byte
// outside visible ASCII.
var ErrBadIdempotencyKey = errors.New("bad idempotency key")

// ErrIdempotencyKeyReused is wrapped by the error of RequestOnce for a key
// already recorded for a different request body: nothing ran, and the
// recorded response is not given.
var ErrIdempotencyKeyReused = errors.New("the idempotency key was used for a different request")

// ValidateIdempotencyKey checks an idempotency key: 1 to
// MaxIdempotencyKeyLen bytes of visible ASCII (0x21 to 0x7e: no space, no
// control character). A key is compared byte for byte: a UUID, or any
// unique string of the client's, will do.
func ValidateIdempotencyKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: it is empty", ErrBadIdempotencyKey)
	}
	if len(key) > MaxIdempotencyKeyLen {
		return fmt.Errorf("%w: %d bytes, over the limit of %d", ErrBadIdempotencyKey, len(key), MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: byte %d is %#x; want visible ASCII (0x21 to 0x7e)", ErrBadIdempotencyKey, i, c)
		}
	}
	return nil
}

// WithIdempotencyRetention sets how many idempotency keys each actor keeps
// (keys, default DefaultIdempotencyKeys) and how many bytes of their
// responses (bytes, default DefaultIdempotencyBytes): past either, the
// oldest keys go, but never the newest. 0 keeps a default.
func WithIdempotencyRetention(keys int, bytes int64) Option {
	return func(o *config) {
		if keys > 0 {
			o.idemKeys = keys
		}
		if bytes > 0 {
			o.idemBytes = bytes
		}
	}
}

// idemRecord is a key to record in an event's transaction.
type idemRecord struct {
	key string
	sum [sha256.Size]byte
}

// RequestOnce is Request under an idempotency key (see
// ValidateIdempotencyKey). When the actor has the key recorded, nothing
// runs: the recorded response is returned, with replayed true and the
// committed alarm state (AlarmChanged false). Otherwise the request runs
// as Request does, and when it commits, the key, a digest of body and the
// response commit with it (a failed event records nothing). A key recorded
// for another body is refused with ErrIdempotencyKeyReused.
func (a *Actor) RequestOnce(ctx context.Context, key string, body []byte) (res hostmod.Result, replayed bool, err error) {
	if err := ValidateIdempotencyKey(key); err != nil {
		return hostmod.Result{}, false, &abi.ActorError{ID: a.id, Err: err}
	}
	rec := &idemRecord{key: key, sum: sha256.Sum256(body)}
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return hostmod.Result{}, false, err
	}
	sum, reply, ok, err := a.store.idemGet(key)
	if err != nil {
		return hostmod.Result{}, false, &abi.ActorError{ID: a.id, Op: "read idempotency key", Err: err}
	}
	if ok {
		if string(sum) != string(rec.sum[:]) {
			return hostmod.Result{}, false, &abi.ActorError{ID: a.id, Err: fmt.Errorf("%w: key %q", ErrIdempotencyKeyReused, key)}
		}
		at, n, err := a.committed()
		if err != nil {
			return hostmod.Result{}, false, err
		}
		return hostmod.Result{Response: reply, Alarm: at, Failures: n}, true, nil
	}
	if err := a.ensureInit(ctx); err != nil {
		return hostmod.Result{}, false, err
	}
	if !a.class.onRequest {
		return hostmod.Result{}, false, &abi.ActorError{ID: a.id, Err: fmt.Errorf("%w: class %s does not export %q", ErrNoExport, a.class.Name, abi.ExportOnRequest)}
	}
	res, err = a.eventKeyed(ctx, abi.ExportOnRequest, body, []uint64{uint64(uint32(len(body)))}, rec)
	return res, false, err
}

// IdempotencyKeys returns the keys the actor keeps, oldest first (for
// tests and tools).
func (a *Actor) IdempotencyKeys(ctx context.Context) ([]string, error) {
	a.mu.Lock()
	defer a.end()
	if err := a.wake(ctx); err != nil {
		return nil, err
	}
	return a.store.idemKeys()
}

// record writes rec with the event's response into the open transaction
// and drops the keys past the retention.
func (a *Actor) record(rec *idemRecord, response []byte) error {
	err := a.store.idemPut(rec.key, rec.sum[:], response, a.e.cfg.clock.Now().UnixMilli(), a.e.cfg.idemKeys, a.e.cfg.idemBytes)
	if err != nil {
		return &abi.ActorError{ID: a.id, Op: "record idempotency key", Err: err}
	}
	return nil
}

// errNoIdemTable: the actor has never recorded a key.
var errNoIdemTable = errors.New("no idempotency table")

// idemStmt prepares one of the idempotency statements; a missing table is
// created when create is true (in the event's transaction), and is
// errNoIdemTable otherwise, which marks nothing failed.
func (s *Store) idemStmt(id stmtID, create bool) (st *sqlite3.Stmt, err error) {
	if st := s.stmts[id]; st != nil {
		return st, nil
	}
	st, _, err = s.conn.Prepare(stmtSQL[id])
	if err != nil && strings.Contains(err.Error(), "no such table") {
		if !create {
			return nil, errNoIdemTable
		}
		if err = s.conn.Exec(idemSchemaIn); err == nil {
			st, _, err = s.conn.Prepare(stmtSQL[id])
		}
	}
	if err != nil {
		return nil, s.fail(err)
	}
	s.stmts[id] = st
	return st, nil
}

// idemGet reads a recorded key: the digest of its request and the
// response; ok is false when it is not recorded.
func (s *Store) idemGet(key string) (sum, reply []byte, ok bool, err error) {
	st, err := s.idemStmt(stIdemGet, false)
	if errors.Is(err, errNoIdemTable) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	defer st.Reset()
	if err := st.BindText(1, key); err != nil {
		return nil, nil, false, err
	}
	if st.Step() {
		return st.ColumnBlob(0, nil), st.ColumnBlob(1, []byte{}), true, nil
	}
	return nil, nil, false, s.fail(st.Err())
}

// idemPut records a key (in the open transaction) and trims the table to
// the latest keep keys whose replies, newest first, fit in bytes (the
// newest always stays).
func (s *Store) idemPut(key string, sum, reply []byte, atMs int64, keep int, bytes int64) error {
	st, err := s.idemStmt(stIdemPut, true)
	if err != nil {
		return err
	}
	if err := st.BindText(1, key); err != nil {
		return err
	}
	if err := st.BindBlob(2, sum); err != nil {
		return err
	}
	if err := st.BindBlob(3, blob(reply)); err != nil {
		return err
	}
	if err := st.BindInt64(4, atMs); err != nil {
		return err
	}
	if err := s.fail(st.Exec()); err != nil {
		return err
	}
	trim, err := s.idemStmt(stIdemTrim, true)
	if err != nil {
		return err
	}
	if err := trim.BindInt64(1, int64(keep)); err != nil {
		return err
	}
	if err := trim.BindInt64(2, bytes); err != nil {
		return err
	}
	return s.fail(trim.Exec())
}

// idemKeys lists the recorded keys, oldest first.
func (s *Store) idemKeys() ([]string, error) {
	st, err := s.idemStmt(stIdemKeys, false)
	if errors.Is(err, errNoIdemTable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer st.Reset()
	var out []string
	for st.Step() {
		out = append(out, st.ColumnText(0))
	}
	return out, s.fail(st.Err())
}
