package engine

import (
	"strconv"
	"sync"

	"github.com/ncruces/go-sqlite3"
)

// storeSchema is the name an actor's database is attached under on a
// pooled connection. Every statement of a Store names it (stmtSQL,
// schemaIn).
const storeSchema = "a"

// maxIdleConns bounds the connections kept for reuse. An idle connection
// holds its instance of SQLite (compiled from WebAssembly to Go) and the
// memory that instance grew to, and no file.
const maxIdleConns = 32

// A pooledConn is a SQLite connection whose main database is an empty
// in-memory one, set up once for the settings every actor database gets
// (exclusive locking, no checkpoint on close, the automatic checkpoint at
// walCheckpointPages), that takes one actor's database at a time under
// storeSchema. Creating a connection creates an instance of SQLite (its
// memory mapped, its data copied in and initialised) and closing one
// unmaps it: reusing one leaves an open with the file's own work (the
// lock, the WAL's recovery, the schema).
//
// A connection is used by one goroutine at a time: the Store that holds
// it, or the pool.
type pooledConn struct {
	conn   *sqlite3.Conn
	attach *sqlite3.Stmt // ATTACH ? AS a
	detach *sqlite3.Stmt // DETACH a
}

// pooledConns keeps idle connections for reuse, at most max.
type pooledConns struct {
	mu   sync.Mutex
	idle []*pooledConn
	max  int
}

// connPool holds the stores' idle connections; checkConns those of the
// checks of snapshots (CheckSnapshot), apart, so that a takeover's check
// finds one idle while the store connections are out with open actors.
var (
	connPool   = &pooledConns{max: maxIdleConns}
	checkConns = &pooledConns{max: maxCheckConns}
)

// maxCheckConns bounds the idle connections kept for checks.
const maxCheckConns = 4

// get takes an idle connection or creates one.
func (p *pooledConns) get() (*pooledConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return pc, nil
	}
	p.mu.Unlock()
	return newPooledConn()
}

// put keeps pc, which has no database attached, for reuse, or closes it
// if the pool holds max already.
func (p *pooledConns) put(pc *pooledConn) {
	p.mu.Lock()
	if len(p.idle) < p.max {
		p.idle = append(p.idle, pc)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	pc.close()
}

func newPooledConn() (*pooledConn, error) {
	// The connection's VFS is the one every database attached to it
	// opens with (storeVFSName).
	conn, err := sqlite3.Open("file::memory:?vfs=" + storeVFSName)
	if err != nil {
		return nil, err
	}
	pc := &pooledConn{conn: conn}
	if err := pc.setUp(); err != nil {
		pc.close()
		return nil, err
	}
	return pc, nil
}

func (pc *pooledConn) setUp() error {
	// A database that closes (a DETACH) keeps its WAL as it is: no
	// checkpoint (see OpenStore).
	if _, err := pc.conn.Config(sqlite3.DBCONFIG_NO_CKPT_ON_CLOSE, true); err != nil {
		return err
	}
	// Exclusive locking without a schema name applies to every database
	// attached later, from its first read: SQLite keeps the WAL index in
	// heap memory (no -shm file) and holds the file's lock until the
	// DETACH. No busy timeout: the lock is taken on the ATTACH and held,
	// so an open of a database another connection holds fails at once
	// (TestAnOpenStoreLocksOutOtherConnections) and nothing later waits
	// for a lock. Snapshots of small
	// databases leave the WAL alone (see Snapshot), so the automatic
	// checkpoint bounds it: at walCheckpointPages pages (512 KiB), not
	// SQLite's 1,000 (4 MiB per open actor); it is the connection's, for
	// whichever database is attached.
	if err := pc.conn.Exec(`PRAGMA locking_mode=EXCLUSIVE`); err != nil {
		return err
	}
	if err := pc.conn.WALAutoCheckpoint(walCheckpointPages); err != nil {
		return err
	}
	var err error
	if pc.attach, _, err = pc.conn.Prepare(`ATTACH ? AS ` + storeSchema); err != nil {
		return err
	}
	if pc.detach, _, err = pc.conn.Prepare(`DETACH ` + storeSchema); err != nil {
		return err
	}
	return nil
}

// close closes the connection and its instance of SQLite.
func (pc *pooledConn) close() {
	if pc.attach != nil {
		pc.attach.Close()
	}
	if pc.detach != nil {
		pc.detach.Close()
	}
	pc.conn.Close()
}

// attachDB attaches the database at path under storeSchema and sets what
// is set per database: WAL and synchronous=NORMAL for a database not yet
// in WAL mode (see attachSettings), a WAL file kept at the
// size the automatic checkpoint lets it reach (walSizeLimit), and a WAL
// that stays when its database closes (FCNTL_PERSIST_WAL: a sleeping
// actor keeps its commits in it). After an error the database
// may be attached: the caller closes the connection. check checks the
// database as a snapshot before anything is set or written
// (checkRestored): a restore just wrote it, unchecked (OpenRestored).
func (pc *pooledConn) attachDB(path string, durable, check bool) error {
	if err := pc.attach.BindText(1, path); err != nil {
		return err
	}
	err := pc.attach.Exec()
	pc.attach.ClearBindings()
	if check {
		err = checkRestored(pc.conn, err)
	}
	if err != nil {
		return err
	}
	settings := attachSettings
	if !inWALMode(pc.conn) {
		settings = toWALSettings + settings
	}
	if durable {
		// In the same statements: at every open of a durable store.
		settings += durableSettings
	}
	if err := pc.conn.Exec(settings); err != nil {
		return err
	}
	if _, err := pc.conn.FileControl(storeSchema, sqlite3.FCNTL_PERSIST_WAL, true); err != nil {
		return err
	}
	return nil
}

// attachSettings are the per-database settings attachDB runs on a
// database in WAL mode. Such a database opens in WAL mode (the file says
// so) with synchronous=NORMAL (the driver's SQLite is built with
// SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, which applies to a database in WAL
// mode whose synchronous was not set): setting either again would only
// cost their statements, at every open.
var attachSettings = `PRAGMA ` + storeSchema + `.journal_size_limit=` + strconv.Itoa(walSizeLimit) + `;`

// durableSettings follow for a store whose commits are durable
// (WithDurableCommits, WithJournal): SQLite syncs the WAL at each commit.
var durableSettings = `PRAGMA ` + storeSchema + `.synchronous=FULL;`

// toWALSettings come first for a database not in WAL mode (or on a
// platform where the store VFS does not read its header).
var toWALSettings = `PRAGMA ` + storeSchema + `.journal_mode=WAL; PRAGMA ` + storeSchema + `.synchronous=NORMAL; `

// inWALMode reports whether the database attached under storeSchema is
// in WAL mode, from the header its file last read (false if its file is
// not one of the store VFS's).
func inWALMode(conn *sqlite3.Conn) bool {
	v, err := conn.FileControl(storeSchema, sqlite3.FCNTL_FILE_POINTER)
	if err != nil {
		return false
	}
	f, ok := unwrapFile(v).(interface{ walHeader() bool })
	return ok && f.walHeader()
}

// detachDB detaches the database under storeSchema, which closes its file
// and releases its lock.
func (pc *pooledConn) detachDB() error {
	return pc.detach.Exec()
}
