package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/format"
)

// The format versions of a snapshot (docs/design.md#format-versions). A
// snapshot of version 1 is the database's SQLite image (or an empty object,
// a deleted actor's tombstone); a later container begins with the line
// "wasmkeep-snapshot/<N>", which no SQLite image does. The actor's schema
// (its tables, and what its meta rows mean) is versioned by the database
// header's user_version: 0, as SQLite leaves it and as every database made
// before versions has it, is version 1.
const (
	// snapshotMagic begins a snapshot of a container format above 1.
	snapshotMagic = "wasmkeep-snapshot/"
	// sqliteMagic begins every SQLite database file.
	sqliteMagic = "SQLite format 3\x00"
	// userVersionAt is the offset of user_version in the database header
	// (a big-endian signed 32-bit integer).
	userVersionAt = 60
	// sqliteHeaderSize is the size of the database header.
	sqliteHeaderSize = 100
)

// CheckSnapshotFormat reads a snapshot's format versions, container and
// schema, from its first bytes, and nothing else: an error wrapping a
// *format.NewerError when either is newer than this build reads (the
// snapshot is to be left as it is, for a node that reads it), an error
// wrapping ErrBadSnapshot when a version is written but is none, and nil
// otherwise (CheckSnapshot then judges the rest). A host checks it before
// it reads anything else of a snapshot; CheckSnapshot does.
func CheckSnapshotFormat(data []byte) error {
	if rest, ok := bytes.CutPrefix(data, []byte(snapshotMagic)); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		v, err := strconv.ParseInt(string(line), 10, 32)
		if err != nil || v <= 0 {
			return fmt.Errorf("%w: its first line %.40q names no container version", ErrBadSnapshot, snapshotMagic+string(line))
		}
		if err := format.Check(format.Snapshot, v); err != nil {
			return err
		}
		// A version this build reads but writes bare (1): no such snapshot
		// is written.
		return fmt.Errorf("%w: container version %d is written as a bare SQLite image", ErrBadSnapshot, v)
	}
	if len(data) < sqliteHeaderSize || !bytes.HasPrefix(data, []byte(sqliteMagic)) {
		return nil
	}
	v := int32(binary.BigEndian.Uint32(data[userVersionAt:]))
	if v < 0 {
		return fmt.Errorf("%w: its schema version (user_version) %d is no version", ErrBadSnapshot, v)
	}
	return format.Check(format.Schema, int64(v))
}

// stampSchemaVersion writes the schema version this build writes into a
// snapshot's database header (b, an SQLite image the snapshot owns), when
// the database carries none (0: made before versions, or by SQLite as is).
// The header's user_version is outside every page's content and SQLite
// keeps no checksum of the file, so nothing else changes; a database
// restored from the snapshot carries it from then on. A version other
// than 0 is left as it is: the database's own.
func stampSchemaVersion(b []byte) {
	if len(b) < sqliteHeaderSize || !bytes.HasPrefix(b, []byte(sqliteMagic)) {
		return
	}
	if binary.BigEndian.Uint32(b[userVersionAt:]) == 0 {
		binary.BigEndian.PutUint32(b[userVersionAt:], format.SchemaVersion)
	}
}

// checkLocalSchema reads the schema version (user_version) from the header
// of the actor database file at path, its first 100 bytes, before SQLite
// opens it: an error wrapping a *format.NewerError when a later build
// wrote the database (a node rolled back onto its data directory), which
// is then left as it is, neither opened nor written, for a node that
// reads it. A file that cannot be read, or is not (yet) an SQLite
// database, is left to SQLite to judge.
func checkLocalSchema(path string) error {
	f, err := openScanFile(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var hdr [sqliteHeaderSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil
	}
	return headerSchema(hdr[:])
}

// headerSchema checks the schema version in an SQLite database header
// (hdr, its first 100 bytes): nil for a version this build reads (0 is 1)
// or for bytes that are no SQLite header, an error wrapping a
// *format.NewerError for a later one, and an error for a negative one,
// which is no version.
func headerSchema(hdr []byte) error {
	if len(hdr) < sqliteHeaderSize || !bytes.HasPrefix(hdr, []byte(sqliteMagic)) {
		return nil
	}
	return format.Check(format.Schema, int64(int32(binary.BigEndian.Uint32(hdr[userVersionAt:]))))
}

// checkAttachedSchema reads the schema version of the database attached
// under storeSchema as SQLite sees it: the header of page 1 in its WAL's
// committed frames, if they hold page 1, else in its file (which
// checkLocalSchema read before the attach). A later build that changed
// the version with a commit and stopped cleanly left it in the WAL, which
// a clean close keeps (see OpenStore). Nothing is written.
func checkAttachedSchema(conn *sqlite3.Conn) error {
	st, _, err := conn.Prepare(`PRAGMA ` + storeSchema + `.user_version`)
	if err != nil {
		return err
	}
	defer st.Close()
	if !st.Step() {
		return st.Err()
	}
	return format.Check(format.Schema, st.ColumnInt64(0))
}
