// Package lazyfs is a FUSE file system for the tests' power cuts, below
// the code under test: a loopback over a backing directory that, as
// Jepsen's LazyFS does, keeps undoable everything a power cut would lose.
// A file's writes and truncations since its last fsync or fdatasync, and
// the names created, removed or renamed in a directory since the
// directory's last fsync, are recorded with what they replaced; Cut copies
// the file system as a power cut at that instant would leave it, with all
// of that undone.
//
// What counts is only what reaches the file system through the mount: a
// program that believes it synced, but did not call fsync or fdatasync on
// the file (or its directory), loses the data in the cut whatever it
// believes.
//
// The backing files are never synced: the record is the model. Regular
// files and directories are modelled, directories by their paths;
// symlinks, special files, O_TMPFILE and moving a directory are refused
// (ENOTSUP, EXDEV), and a rename counts as two name changes, one in each
// directory, each undone unless its own directory was synced.
//
// It is for tests only, and only on Linux (Mount; elsewhere the package is
// empty). Mounting needs /dev/fuse and either the right to mount(2) (root)
// or a fusermount binary; without them Mount skips the test, saying why,
// unless WASMKEEP_REQUIRE_FUSE=1 is set, which makes that a failure.
package lazyfs
