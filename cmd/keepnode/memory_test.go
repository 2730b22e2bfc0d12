package main

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/engine"
)

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]uint64{
		"4GiB": 4 << 30, "512MiB": 512 << 20, "64KiB": 64 << 10, "1000": 1000, " 2 MiB ": 2 << 20,
	} {
		var b byteSize
		if err := b.Set(in); err != nil || uint64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "4GB", "-1", "1.5GiB", "MiB", "9999999999GiB", "0x10"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, b)
		}
	}
	b := byteSize(3 << 20)
	if b.String() != "3MiB" {
		t.Errorf("String() = %q", b.String())
	}
}

// The flags reach the engine: its budget is -max-memory; nonsense is
// refused before the node starts.
func TestMemoryFlags(t *testing.T) {
	parse := func(args ...string) (*memoryFlags, error) {
		fs := flag.NewFlagSet("keepnode", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		m := addMemoryFlags(fs)
		return m, fs.Parse(args)
	}
	m, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := m.options(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.NewEngine(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	if got := eng.Memory().Budget; got != engine.DefaultMaxTotalMemory {
		t.Errorf("default budget %d, want %d", got, engine.DefaultMaxTotalMemory)
	}
	m, _ = parse("-max-memory", "96MiB", "-instance-memory", "8MiB")
	if opts, err = m.options(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	eng2, err := engine.NewEngine(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer eng2.Close(context.Background())
	if got := eng2.Memory().Budget; got != 96<<20 {
		t.Errorf("budget %d, want 96 MiB", got)
	}
	for _, args := range [][]string{
		{"-max-memory", "1MiB", "-instance-memory", "2MiB"},
		{"-instance-memory", "1KiB"},
		{"-instance-memory", "8GiB", "-max-memory", "16GiB"},
	} {
		m, err := parse(args...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.options(t.TempDir()); err == nil || !strings.Contains(err.Error(), "-instance-memory") {
			t.Errorf("%v: %v, want an error naming the flags", args, err)
		}
	}
	if _, err := parse("-max-memory", "lots"); err == nil {
		t.Error("-max-memory lots parsed")
	}
}

// Commits are durable by default, through the node journal in the data
// directory; -durable-commits=false turns it off.
func TestDurableCommitsAreTheDefault(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		journal bool
	}{{nil, true}, {[]string{"-durable-commits=false"}, false}} {
		o, err := parse(t, tc.args, nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		opts, err := o.mem.options(dir)
		if err != nil {
			t.Fatal(err)
		}
		eng, err := engine.NewEngine(context.Background(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(filepath.Join(dir, ".wasmkeep-journal", "journal-0"))
		eng.Close(context.Background())
		if got := err == nil; got != tc.journal {
			t.Errorf("keepnode %v: a journal in the data directory: %v, want %v", tc.args, got, tc.journal)
		}
	}
}
