package engine

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/alarms/internal/iohook"
)

// journal is the node journal (WithJournal): one append-only log that
// every actor database under its root writes its WAL's writes to, so
// that the durable commits of all of them share one fdatasync, where each
// would otherwise sync its own WAL. docs/design.md#journal says why an
// acknowledged event survives with it; in short:
//
//   - A WAL write is made to the WAL file (not synced) and then appended
//     to the journal as a record (the file, the offset, the bytes); a
//     truncation of a WAL too. A commit's sync of its WAL waits until the
//     batch holding its last record is durable: the journal's flusher
//     writes every record appended since its last write in one batch and
//     syncs the journal once, and every commit the batch covers returns
//     (group commit); meanwhile the next batch gathers.
//   - The database files themselves are synced as SQLite asks (a
//     checkpoint syncs the database before the WAL starts again); only
//     the WALs' syncs are the journal's.
//   - Two files take turns. When the one being written is full, appends
//     go to the other, and the full one is retired: every WAL with a
//     record in it is synced in its own file, with its directory, and the
//     file is marked retired. A file is reused only once retired.
//   - At start, before any actor opens, the records of the files not
//     retired are written again into their WALs, in the order they were
//     appended (both files, the older first); each record holds what the
//     WAL held at that offset once written, so doing them all again
//     leaves each WAL as it was at the last record, whatever part of them
//     the disk had kept.
//   - Before a WAL's name is removed or given to other bytes
//     (RemoveDatabase, MoveDatabase, WriteSnapshot), its bytes are synced
//     in its own file and a record says to forget it: at start its earlier
//     records are not written again, so no replay brings back a WAL that
//     is gone beside a database that is another.
type journal struct {
	root string // the actor databases it covers are under root
	// real is root with its symbolic links resolved: SQLite names a
	// database given by a relative path by its real path.
	real  string
	dir   string    // its two files
	names [2]string // their paths

	mu    sync.Mutex
	cond  sync.Cond
	files [2]int    // the two files' descriptors
	gens  [2]uint64 // the generation each file's header last said (live or retired)
	cur   int       // the file appended to
	gen   uint64    // its generation
	size  int64     // each file's size
	off   int64     // where buf goes in files[cur]
	buf   []byte    // records appended, not yet written
	spare []byte

	appended int64   // bytes of records appended since the journal opened
	open     *jbatch // the batch buf's records are in
	flushing bool    // a batch is being written and synced
	kick     chan struct{}
	hurry    chan struct{} // a commit waits: the flusher's delay ends
	soon     chan struct{} // a deferred commit not replicated asks: a longer delay ends in deferredDelay
	stop     chan struct{}
	stopped  chan struct{}
	retiring bool
	err      error // a write or sync failed: nothing is durable any more

	// rootFD is the root directory, open since the journal opened: a
	// syncfs through it reports any write-back error on its file system
	// since then. syncfs is whether retiring syncs the file system once
	// (syncfs) rather than each WAL and directory: on file systems known
	// to make all of it durable (ext4, XFS, btrfs), and only for the WALs
	// on the root's device.
	rootFD  int
	rootDev uint64
	syncfs  bool

	// boot names the running system's boot (journalBoot; 0: unknown). A
	// live file's header says the boot its records were written in: a
	// start in that same boot finds every write they hold still in the
	// files (only a crash of the system or a power cut loses written
	// data), so it replays nothing, and writes nothing over what another
	// process, a build without the journal, wrote since.
	boot uint64

	// paths[i] is the set of WALs (relative to root) with a record in
	// files[i]'s generation: what retiring it syncs, and what a forget
	// looks for.
	paths [2]map[string]struct{}

	syncs    atomic.Int64 // fdatasyncs of the journal
	waits    atomic.Int64 // syncs of a WAL it stood in for
	deferred atomic.Int64 // deferred commits' syncs it stood in for
	waiting  atomic.Int64 // syncs of a WAL waiting for it now
	retired  atomic.Int64 // files retired
	handoffs atomic.Int64 // syncs that handed their processor off
}

// jbatch is a batch of records written and synced together: done is
// closed once they are durable, or err says why they are not.
type jbatch struct {
	done chan struct{}
	err  error
}

func newBatch() *jbatch { return &jbatch{done: make(chan struct{})} }

const (
	journalMagic       = 0x574b4a31 // "WKJ1"
	journalHdrSize     = 4096
	recMagic           = 0x574b5231 // "WKR1"
	recHdrSize         = 36
	recWrite           = 1
	recTruncate        = 2
	recForget          = 3
	recWritePacked     = 4 // a write whose bytes are packed (packZeros)
	journalVersion     = 2 // what a header says: 2 since records may be packed
	journalLive        = 1
	journalRetired     = 2
	journalDirName     = ".wasmkeep-journal"
	defaultJournalSize = 32 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// journalFileSize is each journal file's size (the tests make it small,
// so that files turn often).
var journalFileSize int64 = defaultJournalSize

// journals are the open journals, for the WAL files and the database
// functions to find the one whose root holds a path.
var journals struct {
	sync.RWMutex
	all []*journal
}

// journalFor returns the open journal whose root holds path, or nil.
func journalFor(path string) *journal {
	journals.RLock()
	defer journals.RUnlock()
	for _, j := range journals.all {
		if within(j.root, path) || within(j.real, path) {
			return j
		}
	}
	return nil
}

func within(root, path string) bool {
	return len(path) > len(root) && strings.HasPrefix(path, root) && path[len(root)] == filepath.Separator
}

// openJournal opens the journal of the databases under root, in
// root/.wasmkeep-journal, creating it if needed, and first writes again the records
// of its files not retired into their WALs (replay). Only one journal may
// be open for a root, and no database under it may be open while it
// replays.
func openJournal(root string) (*journal, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	root = filepath.Clean(root)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	journals.Lock()
	defer journals.Unlock()
	for _, o := range journals.all {
		if within(o.real, real) || within(real, o.real) || o.real == real {
			return nil, fmt.Errorf("journal: %s is already covered by the journal of %s", root, o.root)
		}
	}
	j := &journal{rootFD: -1, root: root, real: real, dir: filepath.Join(root, journalDirName), size: journalFileSize, boot: journalBoot()}
	j.cond.L = &j.mu
	j.files = [2]int{-1, -1}
	for i := range j.names {
		j.names[i] = filepath.Join(j.dir, fmt.Sprintf("journal-%d", i))
	}
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if j.rootFD, err = unix.Open(root, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECTORY, 0); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var st unix.Stat_t
	var fs unix.Statfs_t
	if unix.Fstat(j.rootFD, &st) == nil && unix.Fstatfs(j.rootFD, &fs) == nil {
		j.rootDev, j.syncfs = st.Dev, journalSyncfs && syncfsTypes[int64(fs.Type)]
	}
	if err := j.start(); err != nil {
		j.closeFiles()
		return nil, fmt.Errorf("journal %s: %w", j.dir, err)
	}
	j.open = newBatch()
	j.kick, j.hurry, j.soon, j.stop, j.stopped = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go j.flusher()
	journals.all = append(journals.all, j)
	return j, nil
}

// flusher writes and syncs a batch whenever a commit waits for one, until
// the journal closes.
func (j *journal) flusher() {
	defer close(j.stopped)
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	for {
		select {
		case <-j.kick:
		case <-j.stop:
			return
		}
		// A hurry left from a commit that waited for an earlier batch
		// (one that waits now counted itself in waiting before it sent
		// its own).
		select {
		case <-j.hurry:
		default:
		}
		if j.waiting.Load() == 0 {
			// Only deferred commits ask (nudge): no one waits for this
			// batch, so it waits deferredDelay for more to join it, or
			// replicatedDelay when every commit that asked is a
			// delivery whose upload is expected to make it durable first,
			// unless a commit comes to wait meanwhile.
			d := replicatedDelay
			select {
			case <-j.soon:
				d = deferredDelay
			default:
			}
			delay.Reset(d)
		wait:
			for {
				select {
				case <-delay.C:
					break wait
				case <-j.soon:
					if d > deferredDelay {
						d = deferredDelay
						delay.Reset(d)
					}
				case <-j.hurry:
					delay.Stop()
					break wait
				case <-j.stop:
					delay.Stop()
					return // close writes what is left
				}
			}
		}
		j.gather()
		j.mu.Lock()
		for j.flushing {
			j.cond.Wait()
		}
		if len(j.buf) > 0 {
			j.flushLocked()
		}
		j.mu.Unlock()
	}
}

// gather lets the goroutines ready to run go first, while each round of
// them appends more to the batch, before it is written: so that a batch
// holds the commits of the events that the processors were running, and a
// sync's cost is shared by many, where a flusher run at once when woken
// would sync each commit nearly alone. With nothing else ready to run, it
// returns at once.
func (j *journal) gather() {
	j.mu.Lock()
	n := len(j.buf)
	j.mu.Unlock()
	for range gatherRounds {
		runtime.Gosched()
		j.mu.Lock()
		m := len(j.buf)
		j.mu.Unlock()
		if m == n {
			return
		}
		n = m
	}
}

// gatherRounds bounds the rounds of gather.
const gatherRounds = 16

// deferredDelay is how long a batch that only deferred commits asked for
// waits for more (WithSyncedDeliveries). Measured on two cores, durable
// cold firings (the commits deferred, nothing waiting) synced the journal
// about 1,000 times a second without it and ran at 0.87 to 0.89 of the
// rate not durable in the same minutes; with 1 ms, about 200 a second and
// 0.98 to 0.99 (docs/benchmarks.md#output-gate).
const deferredDelay = time.Millisecond

// replicatedDelay is deferredDelay for a batch that only deferred commits
// of replicated deliveries asked for (nudge(true)): those the host's
// upload makes durable in the bucket before anything learns of them
// (Actor.Replicated), so that no one waits for the batch unless an upload
// fails, and then the actor's next call, Settle or its close asks for it
// at once. Measured with eight actors firing in turn on versitygw, the
// journal synced about once for every 4.7 deliveries at 1 ms, 20 at
// 20 ms and 24 at 50 ms, a checkpoint's sync (which waits) about once for
// every 40 (docs/benchmarks.md#lazy-batches).
var replicatedDelay = 20 * time.Millisecond

func (j *journal) closeFiles() {
	for i, fd := range j.files {
		if fd >= 0 {
			unix.Close(fd)
			j.files[i] = -1
		}
	}
	if j.rootFD >= 0 {
		unix.Close(j.rootFD)
		j.rootFD = -1
	}
}

// File systems whose syncfs writes back, and waits for, every file's data
// and every directory's names (statfs's f_type).
var syncfsTypes = map[int64]bool{
	0xEF53:     true, // ext2, ext3, ext4
	0x58465342: true, // XFS
	0x9123683E: true, // btrfs
}

// journalSyncfs, when false, makes retiring sync each WAL (the tests).
var journalSyncfs = true

// start opens the two files, replays what is not retired, marks both
// retired and starts a generation after every one seen.
func (j *journal) start() error {
	created := false
	for i, p := range j.names {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		j.files[i] = fd
		if i == 0 {
			// One process at a time: another's replay would write over
			// the records this one appends (released when it closes).
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				if err == unix.EWOULDBLOCK {
					return fmt.Errorf("in use by another process (another node on the data directory %s?)", j.root)
				}
				return err
			}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Size == 0 {
			created = true
		}
		if st.Size < j.size {
			// Written whole once, so that a sync of what is written into
			// it later has no size or extent of the file to sync with it.
			if err := zeroFill(fd, st.Size, j.size); err != nil {
				return err
			}
			if err := fdatasync(fd); err != nil {
				return err
			}
		}
	}
	if created {
		// The files' names survive a power cut before any record in them
		// counts.
		if err := syncDir(j.dir); err != nil {
			return err
		}
	}
	type live struct {
		i    int
		gen  uint64
		boot uint64
	}
	var lives []live
	var maxGen uint64
	for i, fd := range j.files {
		gen, state, boot, ok, err := readJournalHeader(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", j.names[i], err)
		}
		if !ok {
			continue
		}
		maxGen = max(maxGen, gen)
		if state == journalLive {
			lives = append(lives, live{i, gen, boot})
		}
	}
	slices.SortFunc(lives, func(a, b live) int { return cmp.Compare(a.gen, b.gen) })
	var recs []journalRecord
	sameBoot := true
	for _, l := range lives {
		rs, err := readRecords(j.files[l.i], l.gen)
		if err != nil {
			return err
		}
		recs = append(recs, rs...)
		sameBoot = sameBoot && l.boot != 0 && l.boot == j.boot
	}
	switch {
	case len(recs) == 0:
	case sameBoot:
		// The process that wrote them stopped without retiring them (a
		// crash, a SIGKILL), and the system did not: every write they
		// hold is in its file, with whatever was written there since,
		// by a later process of a build that keeps no journal too. Made
		// durable as they stand, they are retired below; replayed, they
		// would lay older frames over that build's.
		paths := map[string]struct{}{}
		for _, r := range recs {
			if r.kind != recForget {
				paths[r.path] = struct{}{}
			}
		}
		if err := j.syncPaths(paths); err != nil {
			return fmt.Errorf("sync the WALs of a journal not retired: %w", err)
		}
	default:
		if err := j.replay(recs); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	// Generations only grow, across starts too: a file's records of an
	// earlier generation are never read as this one's. The live files are
	// retired oldest first: a cut between the two leaves the newer one
	// live, whose records, replayed again over the WALs now written,
	// write what they hold already; the older one left live would lay its
	// frames over newer ones written at the same offsets since (a WAL
	// started anew after a checkpoint), and lose the newest commits.
	order := []int{0, 1}
	if len(lives) == 2 && lives[0].i == 1 {
		order = []int{1, 0}
	}
	for _, i := range order {
		j.gens[i] = maxGen + uint64(i) + 1
		if err := j.header(i, j.gens[i], journalRetired, true); err != nil {
			return err
		}
	}
	j.gen = maxGen + 3
	j.cur = 0
	j.paths = [2]map[string]struct{}{{}, {}}
	j.gens[0] = j.gen
	// Synced with the first batch.
	if err := j.header(0, j.gen, journalLive, false); err != nil {
		return err
	}
	j.off = journalHdrSize
	return nil
}

// A record, as read back.
type journalRecord struct {
	kind byte
	path string // relative to the root
	off  int64
	data []byte
}

// A file's header: magic, the format's version, generation, state, the
// checksum (CRC-32C) of what precedes it, then the boot the file's records
// were written in (0: not known; journals written before it was kept say
// 0, and their readers do not read it). The header is one 32-byte write
// within a sector. Version 1's records are those of version 2 but the
// packed write; a version past journalVersion is refused (errNewerJournal),
// not skipped: its records may be what a power cut left only there.
func readJournalHeader(fd int) (gen uint64, state uint32, boot uint64, ok bool, err error) {
	var h [32]byte
	n, rerr := unix.Pread(fd, h[:], 0)
	if rerr != nil || n < len(h) || binary.BigEndian.Uint32(h[0:]) != journalMagic {
		return 0, 0, 0, false, nil
	}
	if crc32.Checksum(h[:20], crcTable) != binary.BigEndian.Uint32(h[20:]) {
		return 0, 0, 0, false, nil
	}
	gen, state, boot = binary.BigEndian.Uint64(h[8:]), binary.BigEndian.Uint32(h[16:]), binary.BigEndian.Uint64(h[24:])
	if v := binary.BigEndian.Uint32(h[4:]); v > journalVersion && state == journalLive {
		return gen, state, boot, true, fmt.Errorf("%w: format %d, this build reads up to %d; start the build that wrote it (or a later one) to replay it", errNewerJournal, v, journalVersion)
	}
	return gen, state, boot, true, nil
}

// errNewerJournal is a live journal file of a later build's format.
var errNewerJournal = errors.New("a journal file of a later build, not retired")

func writeJournalHeader(fd int, gen uint64, state uint32, boot uint64) error {
	var h [32]byte
	binary.BigEndian.PutUint32(h[0:], journalMagic)
	binary.BigEndian.PutUint32(h[4:], journalVersion)
	binary.BigEndian.PutUint64(h[8:], gen)
	binary.BigEndian.PutUint32(h[16:], state)
	binary.BigEndian.PutUint32(h[20:], crc32.Checksum(h[:20], crcTable))
	binary.BigEndian.PutUint64(h[24:], boot)
	return pwriteFull(fd, h[:], 0)
}

// journalBoot names the system's current boot: a hash of the kernel's
// boot ID, 0 if it cannot be read (every start then replays). The tests
// replace it to start as after a reboot.
var journalBoot = func() uint64 {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(string(b))
	if err != nil || id == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	return max(h.Sum64(), 1)
}

// A record's header: magic, total length, generation, kind, the path's
// length, offset, the data's length, then the checksum (CRC-32C) of the
// header before it and of the path and data after it.
func appendRecord(b []byte, gen uint64, kind byte, path string, off int64, data []byte) []byte {
	at := len(b)
	n := recHdrSize + len(path) + len(data)
	b = slices.Grow(b, n)[:at+n]
	h := b[at:]
	binary.BigEndian.PutUint32(h[0:], recMagic)
	binary.BigEndian.PutUint32(h[4:], uint32(n))
	binary.BigEndian.PutUint64(h[8:], gen)
	h[16] = kind
	h[17] = 0
	binary.BigEndian.PutUint16(h[18:], uint16(len(path)))
	binary.BigEndian.PutUint64(h[20:], uint64(off))
	binary.BigEndian.PutUint32(h[28:], uint32(len(data)))
	copy(h[recHdrSize:], path)
	copy(h[recHdrSize+len(path):], data)
	c := crc32.Update(crc32.Checksum(h[:32], crcTable), crcTable, h[recHdrSize:n])
	binary.BigEndian.PutUint32(h[32:], c)
	return b
}

// appendWrite appends a write's record to b: packed (recWritePacked) when
// that makes it smaller, as it does a WAL frame of a page mostly free
// (most of an actor's pages hold a few rows), else as it is.
func appendWrite(b []byte, gen uint64, path string, off int64, data []byte) []byte {
	at := len(b)
	b = appendRecord(b, gen, recWritePacked, path, off, nil)
	b = packZeros(b, data)
	if n := len(b) - at; n < recHdrSize+len(path)+len(data) {
		h := b[at:]
		binary.BigEndian.PutUint32(h[4:], uint32(n))
		binary.BigEndian.PutUint32(h[28:], uint32(n-recHdrSize-len(path)))
		c := crc32.Update(crc32.Checksum(h[:32], crcTable), crcTable, h[recHdrSize:n])
		binary.BigEndian.PutUint32(h[32:], c)
		return b
	}
	return appendRecord(b[:at], gen, recWrite, path, off, data)
}

// packZeros appends p to b with its runs of zero bytes left out: p's
// length, then pieces each of a run of zeros (its length) and the bytes
// after it up to the next run worth leaving out (their length, then
// them), lengths as uvarints. Runs are of whole 8-byte words at offsets
// that are multiples of 8, two words at least.
func packZeros(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	words := len(p) / 8
	if words == 0 {
		if len(p) > 0 {
			b = binary.AppendUvarint(b, 0)
			b = binary.AppendUvarint(b, uint64(len(p)))
			b = append(b, p...)
		}
		return b
	}
	const minRun = 2
	w := 0
	for w < words {
		z := zeroWords(p, w, words)
		if z < minRun {
			z = 0
		}
		l := w + z // the bytes kept start at word l
		e := l
		for e < words {
			if word(p, e) != 0 {
				e++
			} else if e+1 < words && word(p, e+1) == 0 {
				break // a run worth leaving out starts at e
			} else {
				e++ // a lone zero word is kept
			}
		}
		end := e * 8
		if e == words {
			end = len(p) // the tail of fewer than 8 bytes is kept
		}
		b = binary.AppendUvarint(b, uint64(z*8))
		b = binary.AppendUvarint(b, uint64(end-l*8))
		b = append(b, p[l*8:end]...)
		w = e
	}
	return b
}

// word is p's w-th 8-byte word.
func word(p []byte, w int) uint64 { return binary.LittleEndian.Uint64(p[w*8 : w*8+8]) }

// zeroWords is how many zero words of p start at word w (of words),
// eight words or-ed together at a time while it can: most of a page an
// actor writes is free, and this scans it ten times as fast as a word at
// a time (BenchmarkPackZeros).
func zeroWords(p []byte, w, words int) int {
	e := w
	for e+8 <= words {
		q := p[e*8 : e*8+64]
		if binary.LittleEndian.Uint64(q)|binary.LittleEndian.Uint64(q[8:])|
			binary.LittleEndian.Uint64(q[16:])|binary.LittleEndian.Uint64(q[24:])|
			binary.LittleEndian.Uint64(q[32:])|binary.LittleEndian.Uint64(q[40:])|
			binary.LittleEndian.Uint64(q[48:])|binary.LittleEndian.Uint64(q[56:]) != 0 {
			break
		}
		e += 8
	}
	for e < words && word(p, e) == 0 {
		e++
	}
	return e - w
}

// unpackZeros is the bytes packZeros packed into b, or an error if b is
// not what it writes.
func unpackZeros(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > 1<<30 {
		return nil, errors.New("a packed write's length is not readable")
	}
	b = b[k:]
	p := make([]byte, 0, n)
	for uint64(len(p)) < n {
		z, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("a packed write's run is not readable")
		}
		b = b[k:]
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) || uint64(len(p))+z+l > n {
			return nil, errors.New("a packed write's piece runs past its end")
		}
		b = b[k:]
		p = append(p, make([]byte, z)...)
		p = append(p, b[:l]...)
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, errors.New("a packed write has bytes past its end")
	}
	return p, nil
}

// readRecords reads a file's records of generation gen, up to the first
// that is not whole (the end of what was written, or a record of an
// earlier generation the file held before).
func readRecords(fd int, gen uint64) ([]journalRecord, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	buf := make([]byte, st.Size)
	if _, err := preadFull(fd, buf, 0); err != nil {
		return nil, err
	}
	var recs []journalRecord
	for off := int64(journalHdrSize); off+recHdrSize <= st.Size; {
		h := buf[off:]
		if binary.BigEndian.Uint32(h[0:]) != recMagic {
			break
		}
		n := int64(binary.BigEndian.Uint32(h[4:]))
		pl, dl := int64(binary.BigEndian.Uint16(h[18:])), int64(binary.BigEndian.Uint32(h[28:]))
		if n != recHdrSize+pl+dl || off+n > st.Size || binary.BigEndian.Uint64(h[8:]) != gen {
			break
		}
		if crc32.Update(crc32.Checksum(h[:32], crcTable), crcTable, h[recHdrSize:n]) != binary.BigEndian.Uint32(h[32:]) {
			break
		}
		recs = append(recs, journalRecord{
			kind: h[16],
			path: string(h[recHdrSize : recHdrSize+pl]),
			off:  int64(binary.BigEndian.Uint64(h[20:])),
			data: h[recHdrSize+pl : n],
		})
		off += n
	}
	return recs, nil
}

// replay writes the records again into their files, in order, skipping a
// file's records before its last forget; then it syncs every file it
// wrote and their directories.
func (j *journal) replay(recs []journalRecord) error {
	lastForget := map[string]int{}
	for i, r := range recs {
		if r.kind == recForget {
			lastForget[r.path] = i
		}
	}
	fds := map[string]int{}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	dirs := map[string]struct{}{}
	for i, r := range recs {
		if r.kind == recForget {
			continue
		}
		if k, ok := lastForget[r.path]; ok && i < k {
			continue
		}
		p := filepath.Join(j.root, r.path)
		fd, ok := fds[p]
		if !ok {
			if _, err := os.Stat(strings.TrimSuffix(p, "-wal")); err != nil {
				// No database beside it: it was removed with its WAL
				// (which forgets it) or never named; write nothing.
				continue
			}
			var err error
			if fd, err = unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644); err != nil {
				return err
			}
			fds[p] = fd
			dirs[filepath.Dir(p)] = struct{}{}
		}
		switch r.kind {
		case recWrite, recWritePacked:
			data := r.data
			if r.kind == recWritePacked {
				var err error
				if data, err = unpackZeros(data); err != nil {
					return fmt.Errorf("the record of %s at %d: %w", r.path, r.off, err)
				}
			}
			if h := iohook.Func; h != nil {
				h("write", p, r.off, int64(len(data)))
			}
			if err := pwriteFull(fd, data, r.off); err != nil {
				return err
			}
		case recTruncate:
			if h := iohook.Func; h != nil {
				h("truncate", p, r.off, 0)
			}
			if err := unix.Ftruncate(fd, r.off); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the record of %s at %d is of a kind this build does not know (%d)", r.path, r.off, r.kind)
		}
	}
	for p, fd := range fds {
		if err := syncNamed(fd, p); err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// JournalStats counts the node journal's work (WithJournal).
type JournalStats struct {
	// Syncs is how many times the journal was synced; Waits how many
	// syncs of a WAL waited for it instead (each durable commit is one),
	// and Deferred how many a deferred commit left for it
	// (WithSyncedDeliveries): (Waits + Deferred) / Syncs is the commits
	// per sync.
	Syncs, Waits, Deferred int64
	// Retired is how many times a journal file was retired: every WAL
	// with a record in it synced in its own file.
	Retired int64
	// Bytes is how many bytes of records were appended.
	Bytes int64
	// Handoffs is how many of the syncs handed their goroutine's
	// processor to other goroutines for their length, as the Go runtime
	// does for the calls it knows will block: those made while more guest
	// calls waited for a slot than commits for the sync.
	Handoffs int64
}

func (j *journal) stats() JournalStats {
	if j == nil {
		return JournalStats{}
	}
	j.mu.Lock()
	n := j.appended
	j.mu.Unlock()
	return JournalStats{Syncs: j.syncs.Load(), Waits: j.waits.Load(), Deferred: j.deferred.Load(), Retired: j.retired.Load(), Bytes: n, Handoffs: j.handoffs.Load()}
}

// syncing is how many syncs of a WAL wait for the journal now.
func (j *journal) syncing() int {
	if j == nil {
		return 0
	}
	return int(j.waiting.Load())
}

// rel is path relative to the root (it is under it, or under its real
// path).
func (j *journal) rel(path string) string {
	if within(j.root, path) {
		return path[len(j.root)+1:]
	}
	return path[len(j.real)+1:]
}

// append appends a record for the WAL at path (under the root) and
// returns the batch it is in.
func (j *journal) append(kind byte, path string, off int64, data []byte) (*jbatch, error) {
	rel := j.rel(path)
	n := int64(recHdrSize + len(rel) + len(data))
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return nil, j.err
	}
	if n > j.size-journalHdrSize {
		return nil, fmt.Errorf("journal: a record of %d bytes is larger than a journal file", n)
	}
	if err := j.roomLocked(n); err != nil {
		return nil, err
	}
	at := len(j.buf)
	if kind == recWrite {
		j.buf = appendWrite(j.buf, j.gen, rel, off, data)
	} else {
		j.buf = appendRecord(j.buf, j.gen, kind, rel, off, data)
	}
	n = int64(len(j.buf) - at)
	j.paths[j.cur][rel] = struct{}{}
	j.appended += n
	return j.open, nil
}

// nudge asks the flusher for a batch without waiting for it: a deferred
// commit's records are made durable within deferredDelay, or, replicated
// (its upload expected to make it durable elsewhere first), within
// replicatedDelay; sooner once a commit waits.
func (j *journal) nudge(replicated bool) {
	j.deferred.Add(1)
	if !replicated {
		select {
		case j.soon <- struct{}{}:
		default:
		}
	}
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// wait returns once the batch b (append returned it) is durable: it asks
// the flusher for a batch, which holds b or comes after it.
func (j *journal) wait(b *jbatch) error {
	j.waits.Add(1)
	return j.await(b)
}

// await is wait, not counted as a sync of a WAL: a deferred commit's
// batch, waited for by the actor's next call.
func (j *journal) await(b *jbatch) error {
	select {
	case <-b.done:
		return b.err
	default:
	}
	j.waiting.Add(1)
	defer j.waiting.Add(-1)
	select {
	case j.kick <- struct{}{}:
	default: // a batch is asked for already
	}
	select {
	case j.hurry <- struct{}{}:
	default:
	}
	<-b.done
	return b.err
}

// flushLocked writes the open batch to the current file and syncs it,
// without the lock held meanwhile (j.mu held on entry and return), and a
// new batch gathers.
func (j *journal) flushLocked() {
	j.flushing = true
	w, batch, off, fd, name := j.buf, j.open, j.off, j.files[j.cur], j.name(j.cur)
	j.buf, j.spare, j.open = j.spare[:0], nil, newBatch()
	j.off += int64(len(w))
	j.mu.Unlock()
	err := j.writeSync(fd, name, w, off)
	j.mu.Lock()
	j.spare = w[:0]
	if err != nil {
		err = fmt.Errorf("journal %s: %w", name, err)
		if j.err == nil {
			j.err = err
		}
		// What was gathered meanwhile can never be durable either.
		j.open.err = j.err
		close(j.open.done)
		j.open = newBatch()
		j.open.err = j.err
	}
	batch.err = err
	close(batch.done)
	j.flushing = false
	j.cond.Broadcast()
}

// header writes file i's header, and with sync syncs it.
func (j *journal) header(i int, gen uint64, state uint32, sync bool) error {
	if h := iohook.Func; h != nil {
		h("write", j.name(i), 0, 32)
	}
	if err := writeJournalHeader(j.files[i], gen, state, j.boot); err != nil {
		return err
	}
	if !sync {
		return nil
	}
	return syncNamed(j.files[i], j.name(i))
}

func (j *journal) name(i int) string { return j.names[i] }

func (j *journal) writeSync(fd int, name string, b []byte, off int64) error {
	if len(b) > 0 {
		if h := iohook.Func; h != nil {
			h("write", name, off, int64(len(b)))
		}
		if err := pwriteFull(fd, b, off); err != nil {
			return err
		}
	}
	if err := j.datasync(fd); err != nil {
		return err
	}
	if h := iohook.Func; h != nil {
		h("sync", name, 0, 0)
	}
	j.syncs.Add(1)
	return nil
}

// roomLocked returns once the current file has room for n bytes more,
// making the other file the current one when it has not: what waits in
// buf is written and synced in this one first, the other is waited for
// until it is retired, and this one is retired in the background.
func (j *journal) roomLocked(n int64) error {
	for {
		if j.err != nil {
			return j.err
		}
		if j.off+int64(len(j.buf))+n <= j.size {
			return nil
		}
		if j.flushing || j.retiring {
			j.cond.Wait()
			continue
		}
		if len(j.buf) > 0 {
			// Others may append while this writes: round again.
			j.flushLocked()
			continue
		}
		break
	}
	old, next := j.cur, 1-j.cur
	j.gen++
	// The header is synced with the first records written after it.
	if err := j.header(next, j.gen, journalLive, false); err != nil {
		j.err = fmt.Errorf("journal %s: %w", j.name(next), err)
		return j.err
	}
	j.gens[next] = j.gen
	j.cur, j.off = next, journalHdrSize
	paths := j.paths[old]
	j.paths[next] = map[string]struct{}{}
	j.retiring = true
	go j.retire(old, paths)
	return nil // the new file has room for any record
}

// retire syncs every WAL with a record in file i, with their directories,
// then marks file i retired, so that it may be reused.
func (j *journal) retire(i int, paths map[string]struct{}) {
	err := j.syncPaths(paths)
	if err == nil {
		err = j.header(i, j.gens[i], journalRetired, true)
	}
	j.mu.Lock()
	if err != nil && j.err == nil {
		j.err = fmt.Errorf("journal: retiring %s: %w", j.name(i), err)
	}
	j.paths[i] = nil
	j.retiring = false
	j.retired.Add(1)
	j.cond.Broadcast()
	j.mu.Unlock()
}

// syncPaths syncs the files at paths (relative to the root) that exist,
// and their directories, a few at a time.
func (j *journal) syncPaths(paths map[string]struct{}) error {
	if j.syncfs && len(paths) > 0 {
		// One syncfs for the WALs on the root's file system (every one,
		// unless a directory under the root is another mount): on a
		// thousand busy actors, a tenth of the time of a sync each.
		rest := map[string]struct{}{}
		var st unix.Stat_t
		for rel := range paths {
			if err := unix.Stat(filepath.Dir(filepath.Join(j.root, rel)), &st); err == nil && st.Dev != j.rootDev {
				rest[rel] = struct{}{}
			}
		}
		if err := syncFS(j.rootFD, j.root); err != nil {
			return err
		}
		paths = rest
	}
	dirs := map[string]struct{}{}
	work := make(chan string)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for p := range work {
				if err := syncFile(p); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for rel := range paths {
		p := filepath.Join(j.root, rel)
		dirs[filepath.Dir(p)] = struct{}{}
		work <- p
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	for d := range dirs {
		if err := syncDir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}

// syncFile syncs the file at p's data, if it exists.
func syncFile(p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return syncNamed(fd, p)
}

// syncFS syncs the file system holding the directory fd, named root, and
// tells the power-cut test's hook.
func syncFS(fd int, root string) error {
	if err := unix.Syncfs(fd); err != nil {
		return err
	}
	if h := iohook.Func; h != nil {
		h("syncfs", root, 0, 0)
	}
	return nil
}

// syncNamed syncs the data of the file fd, named name, and tells the
// power-cut test's hook.
func syncNamed(fd int, name string) error {
	if err := fdatasync(fd); err != nil {
		return err
	}
	if h := iohook.Func; h != nil {
		h("sync", name, 0, 0)
	}
	return nil
}

func syncDir(d string) error {
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fdatasync(fd)
}

// forget is called before the WAL at path is removed or renamed, or its
// name given to other bytes: if the journal holds records of it, the WAL
// is synced in its own file and a record says to forget them, durable
// before forget returns.
func (j *journal) forget(path string) error {
	rel := j.rel(path)
	j.mu.Lock()
	_, in0 := j.paths[0][rel]
	_, in1 := j.paths[1][rel]
	j.mu.Unlock()
	if !in0 && !in1 {
		return nil
	}
	if err := syncFile(path); err != nil {
		return err
	}
	b, err := j.append(recForget, path, 0, nil)
	if err != nil {
		return err
	}
	return j.wait(b)
}

// close writes and syncs what was appended, retires both files (every
// WAL synced in its own file: the next start replays nothing) and closes
// them.
func (j *journal) close() error {
	journals.Lock()
	journals.all = slices.DeleteFunc(journals.all, func(o *journal) bool { return o == j })
	journals.Unlock()
	close(j.stop)
	<-j.stopped
	j.mu.Lock()
	for j.flushing || j.retiring {
		j.cond.Wait()
	}
	err := j.err
	if err == nil && len(j.buf) > 0 {
		j.flushLocked()
		err = j.err
	}
	if err == nil {
		// Nothing may be appended to a closed journal.
		j.err = errors.New("journal: closed")
	}
	paths := j.paths[j.cur]
	j.mu.Unlock()
	if err == nil {
		err = j.syncPaths(paths)
	}
	if err == nil {
		for i := range j.files {
			if err = j.header(i, j.gens[i], journalRetired, true); err != nil {
				break
			}
		}
	}
	j.closeFiles()
	return err
}

// zeroFill writes zeros from off to end.
func zeroFill(fd int, off, end int64) error {
	z := make([]byte, min(end-off, 1<<20))
	for off < end {
		n := min(end-off, int64(len(z)))
		if err := pwriteFull(fd, z[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func preadFull(fd int, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
