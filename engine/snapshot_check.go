package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ncruces/go-sqlite3"
)

// ErrBadSnapshot is the cause of CheckSnapshot's errors: the bytes are not
// an SQLite database the host wrote.
var ErrBadSnapshot = errors.New("not a database this host wrote")

// schemaObject is one row of sqlite_schema.
type schemaObject struct{ typ, name, table, sql string }

var (
	hostSchemaOnce sync.Once
	hostSchema     map[string]schemaObject // by type and name
	hostSchemaErr  error
)

// readSchema returns the objects of a database by "type name".
func readSchema(conn *sqlite3.Conn) (map[string]schemaObject, error) {
	st, _, err := conn.Prepare(`SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema`)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := map[string]schemaObject{}
	for st.Step() {
		o := schemaObject{st.ColumnText(0), st.ColumnText(1), st.ColumnText(2), st.ColumnText(3)}
		out[o.typ+" "+o.name] = o
	}
	return out, st.Err()
}

// expectedSchema is the schema OpenStore creates, with the table of
// idempotency keys, which the first event that records one creates.
func expectedSchema() (map[string]schemaObject, error) {
	hostSchemaOnce.Do(func() {
		conn, err := sqlite3.Open(":memory:")
		if err != nil {
			hostSchemaErr = err
			return
		}
		defer conn.Close()
		if hostSchemaErr = conn.Exec(schema + idemSchema); hostSchemaErr == nil {
			hostSchema, hostSchemaErr = readSchema(conn)
		}
	})
	return hostSchema, hostSchemaErr
}

// CheckSnapshot tells whether a snapshot read from the bucket is a database
// the host could have written, before it replaces anything: it writes data
// to scratch (a path on the data directory's file system, removed again),
// and checks that SQLite reads it whole (PRAGMA quick_check) and that every
// object in it (table, index, trigger, view) is one of the host's, with
// the host's definition. Tables of the host that are missing are fine
// (opening creates them). The error wraps ErrBadSnapshot and says why,
// except for a snapshot whose container or schema is of a later format
// than this build reads (CheckSnapshotFormat, checked first): that error
// wraps a *format.NewerError, and the snapshot is not this host's to
// judge (a later build reads it).
func CheckSnapshot(scratch string, data []byte) error {
	if err := CheckSnapshotFormat(data); err != nil {
		return err
	}
	want, err := expectedSchema()
	if err != nil {
		return fmt.Errorf("the host's schema: %w", err)
	}
	defer RemoveDatabase(scratch)
	if err := WriteSnapshot(scratch, data); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	conn, err := sqlite3.OpenFlags(scratch, sqlite3.OPEN_READWRITE)
	if err != nil {
		return bad("%v", err)
	}
	defer conn.Close()
	st, _, err := conn.Prepare(`PRAGMA quick_check(1)`)
	if err != nil {
		return bad("%v", err)
	}
	result := ""
	if st.Step() {
		result = st.ColumnText(0)
	}
	err = st.Err()
	st.Close()
	if err != nil {
		return bad("%v", err)
	}
	if result != "ok" {
		return bad("integrity check: %.200s", result)
	}
	got, err := readSchema(conn)
	if err != nil {
		return bad("%v", err)
	}
	for k, o := range got {
		w, ok := want[k]
		if !ok {
			return bad("it has a %s %q the host does not create", o.typ, o.name)
		}
		if w != o {
			return bad("its %s %q is not defined as the host defines it", o.typ, o.name)
		}
	}
	return nil
}
