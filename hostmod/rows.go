package hostmod

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/ncruces/go-sqlite3"
)

// AlarmSchema returns the statements that create the alarm's tables
// (_wasmkeep_alarm, _wasmkeep_meta) in schema (when empty, the names are
// not qualified): all the plugin creates in an actor's database.
func AlarmSchema(schema string) string {
	if schema == "" {
		return alarmSchema
	}
	return strings.ReplaceAll(alarmSchema, "CREATE TABLE IF NOT EXISTS ", "CREATE TABLE IF NOT EXISTS "+schema+".")
}

// alarmSchema creates the tables of the alarm and the host's meta rows.
const alarmSchema = `
CREATE TABLE IF NOT EXISTS _wasmkeep_alarm (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS _wasmkeep_meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);`

// The statements of Rows, each prepared on first use.
type rowStmt int

const (
	stGetAlarm rowStmt = iota
	stPutAlarm
	stDelAlarm
	stGetMeta
	stState
	stPutMeta
	stDelMeta
	stBegin
	stCommit
	stRollback
	nRowStmts
)

// rowSQL are the statements of Rows, every table in schema s.
func rowSQL(s string) [nRowStmts]string {
	return [nRowStmts]string{
		stGetAlarm: `SELECT at_ms FROM ` + s + `._wasmkeep_alarm WHERE id = 1`,
		stPutAlarm: `INSERT INTO ` + s + `._wasmkeep_alarm (id, at_ms) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms`,
		stDelAlarm: `DELETE FROM ` + s + `._wasmkeep_alarm WHERE id = 1`,
		stGetMeta:  `SELECT value FROM ` + s + `._wasmkeep_meta WHERE key = ?`,
		stState:    `SELECT 0, at_ms FROM ` + s + `._wasmkeep_alarm WHERE id = 1 UNION ALL SELECT key, value FROM ` + s + `._wasmkeep_meta`,
		stPutMeta:  `INSERT INTO ` + s + `._wasmkeep_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
		stDelMeta:  `DELETE FROM ` + s + `._wasmkeep_meta WHERE key = ?`,
		stBegin:    `BEGIN IMMEDIATE`,
		stCommit:   `COMMIT`,
		stRollback: `ROLLBACK`,
	}
}

// RowsSQL is how Rows reach the alarm's tables on a connection: made once
// (NewRowsSQL), shared by every Rows made with it.
type RowsSQL struct {
	sql    [nRowStmts]string
	create string
}

// RowsConfig says where the alarm's tables are.
type RowsConfig struct {
	// Schema is the schema of the connection that holds the tables
	// ("main" when empty).
	Schema string
	// Create runs when a statement finds a table missing, before it is
	// prepared again (empty: AlarmSchema(Schema)). A host whose database
	// has tables of its own beside the alarm's creates them all here.
	Create string
	// Begin opens a transaction (empty: BEGIN IMMEDIATE, since other
	// connections may share the database's file).
	Begin string
}

// NewRowsSQL returns the statements of c. A host makes them once, not for
// each connection.
func NewRowsSQL(c RowsConfig) *RowsSQL {
	if c.Schema == "" {
		c.Schema = "main"
	}
	q := &RowsSQL{sql: rowSQL(c.Schema), create: c.Create}
	if q.create == "" {
		q.create = AlarmSchema(c.Schema)
	}
	if c.Begin != "" {
		q.sql[stBegin] = c.Begin
	}
	return q
}

// Rows are one actor's alarm, its failure count and the host's meta rows
// in a schema of a SQLite connection (ncruces/go-sqlite3), with the
// transaction statements around them: what the alarm functions write
// (AlarmStore) and a delivery runs in (DeliveryStore). A Table is Rows on
// the main schema of a host's connection; a host that lays out its
// databases its own way (package engine attaches each actor's database to
// a pooled connection under a schema of its own) makes its Rows with
// NewRows. Statements are prepared on first use and kept until Close. Rows
// are used by one goroutine at a time.
type Rows struct {
	conn   *sqlite3.Conn
	q      *RowsSQL
	stmts  [nRowStmts]*sqlite3.Stmt
	inTx   bool
	failed bool
}

// NewRows returns the Rows of q on conn. The connection stays the
// caller's. A host may keep Rows by value in a struct of its own
// (*NewRows(conn, q)), so that opening a database allocates no Rows of
// its own; a Rows is copied only before its first use.
func NewRows(conn *sqlite3.Conn, q *RowsSQL) *Rows { return &Rows{conn: conn, q: q} }

// Failed reports whether SQLite returned an error to one of the Rows'
// statements: a host that pools its connections closes such a one rather
// than reusing it.
func (r *Rows) Failed() bool { return r.failed }

// fail notes an error from SQLite (see Failed) and returns it, with
// WithENOSPC.
func (r *Rows) fail(err error) error {
	if err != nil {
		r.failed = true
		err = WithENOSPC(err)
	}
	return err
}

// WithENOSPC gives an error of SQLite's for a write that found the disk
// full (SQLITE_FULL, which the driver returns without the system's error)
// syscall.ENOSPC back, so that a host tells a full disk from other
// failures with errors.Is(err, syscall.ENOSPC), as it does for the files
// it writes itself. Any other error is returned as it is.
func WithENOSPC(err error) error {
	if errors.Is(err, sqlite3.FULL) && !errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %w", err, syscall.ENOSPC)
	}
	return err
}

// stmt returns the prepared statement id, preparing it on its first use:
// an event prepares only what it runs. A table that is missing is created
// (RowsConfig.Create) and the statement prepared again. Exec leaves a
// statement reset; one stepped row by row is reset when its caller is
// done with it.
func (r *Rows) stmt(id rowStmt) (*sqlite3.Stmt, error) {
	if st := r.stmts[id]; st != nil {
		return st, nil
	}
	st, _, err := r.conn.Prepare(r.q.sql[id])
	if err != nil && strings.Contains(err.Error(), "no such table") {
		if err = r.conn.Exec(r.q.create); err == nil {
			st, _, err = r.conn.Prepare(r.q.sql[id])
		}
	}
	if err != nil {
		return nil, r.fail(err)
	}
	r.stmts[id] = st
	return st, nil
}

// Close finalises the statements; an open transaction rolls back first.
// The connection stays open.
func (r *Rows) Close() error {
	if r == nil {
		return nil
	}
	if r.inTx {
		_ = r.run(stRollback)
		r.inTx = false
	}
	var errs []error
	for i, st := range r.stmts {
		if st != nil {
			if err := st.Close(); err != nil {
				r.failed = true
				errs = append(errs, err)
			}
			r.stmts[i] = nil
		}
	}
	return errors.Join(errs...)
}

// run steps a statement that returns no rows (Exec resets it).
func (r *Rows) run(id rowStmt) error {
	st, err := r.stmt(id)
	if err != nil {
		return err
	}
	return r.fail(st.Exec())
}

// Begin starts a transaction (RowsConfig.Begin).
func (r *Rows) Begin() error {
	if r.inTx {
		return errors.New("transaction already open")
	}
	if err := r.run(stBegin); err != nil {
		return err
	}
	r.inTx = true
	return nil
}

// Commit commits the transaction Begin opened; if the commit fails, it
// rolls back.
func (r *Rows) Commit() error {
	if !r.inTx {
		return errors.New("no open transaction")
	}
	err := r.run(stCommit)
	if err != nil {
		_ = r.run(stRollback)
	}
	r.inTx = false
	return err
}

// Rollback rolls the transaction Begin opened back; without one it does
// nothing.
func (r *Rows) Rollback() error {
	if !r.inTx {
		return nil
	}
	r.inTx = false
	return r.run(stRollback)
}

// InTx reports whether Begin opened a transaction that is still open.
func (r *Rows) InTx() bool { return r.inTx }

// Alarm reads the alarm: its time in Unix milliseconds and whether one is set.
func (r *Rows) Alarm() (atMs int64, ok bool, err error) {
	st, err := r.stmt(stGetAlarm)
	if err != nil {
		return 0, false, err
	}
	defer st.Reset()
	if st.Step() {
		return st.ColumnInt64(0), true, nil
	}
	return 0, false, r.fail(st.Err())
}

// SetAlarm sets the alarm to atMs, replacing any.
func (r *Rows) SetAlarm(atMs int64) error {
	st, err := r.stmt(stPutAlarm)
	if err != nil {
		return err
	}
	if err := st.BindInt64(1, atMs); err != nil {
		return err
	}
	return r.fail(st.Exec())
}

// ClearAlarm removes the alarm, if any.
func (r *Rows) ClearAlarm() error {
	st, err := r.stmt(stDelAlarm)
	if err != nil {
		return err
	}
	return r.fail(st.Exec())
}

// Meta reads a meta value.
func (r *Rows) Meta(key string) (value string, ok bool, err error) {
	st, err := r.stmt(stGetMeta)
	if err != nil {
		return "", false, err
	}
	defer st.Reset()
	if err := st.BindText(1, key); err != nil {
		return "", false, err
	}
	if st.Step() {
		return st.ColumnText(0), true, nil
	}
	return "", false, r.fail(st.Err())
}

// SetMeta writes a meta value.
func (r *Rows) SetMeta(key, value string) error {
	st, err := r.stmt(stPutMeta)
	if err != nil {
		return err
	}
	if err := st.BindText(1, key); err != nil {
		return err
	}
	if err := st.BindText(2, value); err != nil {
		return err
	}
	return r.fail(st.Exec())
}

// DeleteMeta removes a meta value.
func (r *Rows) DeleteMeta(key string) error {
	st, err := r.stmt(stDelMeta)
	if err != nil {
		return err
	}
	if err := st.BindText(1, key); err != nil {
		return err
	}
	return r.fail(st.Exec())
}

// CommittedState is what an actor keeps of its committed state: the
// alarm, its failure count and the meta rows an index updater and State
// read (see Rows.State).
type CommittedState struct {
	Alarm    *int64 // Unix ms, nil for none
	Failures int
	Indexed  string // MetaAlarmIndexed, empty when absent
	InitDone bool   // MetaInitDone is present
}

// State reads the alarm, the failure count and the meta rows
// MetaAlarmIndexed and MetaInitDone with one statement, which is one read
// of one committed state: the values are those Alarm, Failures and Meta
// return. The statement reads the alarm row (its first column an integer)
// and every meta row (a key, which is text), the few there are: preparing
// it costs less than preparing the statements of those reads, or one
// statement of a subquery for each value.
func (r *Rows) State() (CommittedState, error) {
	var cs CommittedState
	st, err := r.stmt(stState)
	if err != nil {
		return cs, err
	}
	defer st.Reset()
	for st.Step() {
		switch st.ColumnType(0) {
		case sqlite3.INTEGER:
			at := st.ColumnInt64(1)
			cs.Alarm = &at
		case sqlite3.TEXT:
			switch st.ColumnText(0) {
			case MetaAlarmFailures:
				if cs.Failures, err = parseFailures(st.ColumnText(1)); err != nil {
					return CommittedState{}, err
				}
			case MetaAlarmIndexed:
				cs.Indexed = st.ColumnText(1)
			case MetaInitDone:
				cs.InitDone = true
			}
		}
	}
	if err := st.Err(); err != nil {
		return CommittedState{}, r.fail(err)
	}
	return cs, nil
}

// Failures reads the committed failure count of the pending alarm (0 when
// none is recorded).
func (r *Rows) Failures() (int, error) {
	v, ok, err := r.Meta(MetaAlarmFailures)
	if err != nil || !ok {
		return 0, err
	}
	return parseFailures(v)
}

// parseFailures reads the value of MetaAlarmFailures.
func parseFailures(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("meta %s: malformed value %q", MetaAlarmFailures, v)
	}
	return n, nil
}

// SetFailures writes the failure count; 0 removes the row.
func (r *Rows) SetFailures(n int) error {
	if n <= 0 {
		return r.DeleteMeta(MetaAlarmFailures)
	}
	return r.SetMeta(MetaAlarmFailures, strconv.Itoa(n))
}

// DeadLetter reads the dead letter; ok is false when no alarm was given up.
func (r *Rows) DeadLetter() (d DeadLetter, ok bool, err error) {
	v, ok, err := r.Meta(MetaAlarmDeadLetter)
	if err != nil || !ok {
		return DeadLetter{}, false, err
	}
	d, err = ParseDeadLetter(v)
	return d, err == nil, err
}

// SetDeadLetter writes the dead letter (its Error cut to 1 KiB).
func (r *Rows) SetDeadLetter(d DeadLetter) error {
	if len(d.Error) > 1024 {
		d.Error = d.Error[:1024]
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return r.SetMeta(MetaAlarmDeadLetter, string(b))
}
