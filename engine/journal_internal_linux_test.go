package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A journal file used again holds the records of its earlier generation
// past the new ones; the replay reads only the new generation's, even
// when an old record starts exactly where the new ones end.
func TestAReusedJournalFileReplaysOnlyItsOwnGeneration(t *testing.T) {
	t.Cleanup(SetJournalRebootEachStart()) // each start replays
	root := t.TempDir()
	db := filepath.Join(root, "a.db")
	if err := os.WriteFile(db, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wal := db + "-wal"
	rec := func(s string) []byte { return []byte(s + "................")[:16] }
	size := int64(recHdrSize + len("a.db-wal") + 16)
	prev := journalFileSize
	journalFileSize = journalHdrSize + 2*size // two records a file
	defer func() { journalFileSize = prev }()
	j, err := openJournal(root)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	put := func(off int64, data []byte) {
		t.Helper()
		b, err := j.append(recWrite, wal, off, data)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.wait(b); err != nil {
			t.Fatal(err)
		}
	}
	put(0, rec("old-1"))   // file 0
	put(100, rec("old-2")) // file 0, full
	put(200, rec("x-3"))   // file 1
	put(300, rec("x-4"))   // file 1, full
	put(0, rec("new-1"))   // file 0 again, where old-1 was; old-2 follows it
	for deadline := time.Now().Add(10 * time.Second); j.stats().Retired < 2; {
		if time.Now().After(deadline) {
			t.Fatal("file 1 was not retired")
		}
		time.Sleep(time.Millisecond)
	}
	after := t.TempDir()
	for _, p := range []string{"a.db", ".wasmkeep-journal/journal-0", ".wasmkeep-journal/journal-1"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(after, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(after, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	re, err := openJournal(after)
	if err != nil {
		t.Fatal(err)
	}
	re.close()
	got, err := os.ReadFile(filepath.Join(after, "a.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, rec("new-1")) {
		t.Fatalf("the WAL after the replay starts %q, want the new generation's record", got[:min(len(got), 16)])
	}
	if bytes.Contains(got, []byte("old-2")) {
		t.Fatal("the replay wrote a record of the file's earlier generation")
	}
}
