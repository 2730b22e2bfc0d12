// Package diskfault lets tests fill a disk without one: package engine asks Fit
// before each write of an actor's files (its database and WAL, a new
// database's first image, a restored snapshot), and a test that called
// Limit makes the writes under a directory fail with ENOSPC once a number
// of bytes were written, as a full file system would: a write that does
// not fit writes what fits (a short write), and the next one fails. It is
// internal to the module and nothing but tests call Limit; without a
// limit, Fit costs one atomic load.
package diskfault

import (
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Disk is the space left for the files under one directory.
type Disk struct {
	dir     string
	mu      sync.Mutex
	free    int64
	refused int64
}

var (
	active atomic.Int32 // disks limited now: 0 is the fast path
	mu     sync.Mutex
	disks  []*Disk
)

// Limit gives the files under dir free more bytes; the writes past them
// fail until SetFree gives space back or Release ends the limit.
func Limit(dir string, free int64) *Disk {
	d := &Disk{dir: filepath.Clean(dir) + string(filepath.Separator), free: free}
	mu.Lock()
	disks = append(disks, d)
	active.Add(1)
	mu.Unlock()
	return d
}

// SetFree sets the bytes left (0: the disk is full).
func (d *Disk) SetFree(n int64) {
	d.mu.Lock()
	d.free = n
	d.mu.Unlock()
}

// Unlimited gives the disk all the space it wants again.
func (d *Disk) Unlimited() { d.SetFree(math.MaxInt64) }

// Refused is how many writes failed for want of space.
func (d *Disk) Refused() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refused
}

// Release ends the limit.
func (d *Disk) Release() {
	mu.Lock()
	defer mu.Unlock()
	for i, x := range disks {
		if x == d {
			disks = append(disks[:i], disks[i+1:]...)
			active.Add(-1)
			return
		}
	}
}

// Fit returns how many of the n bytes to be written to the file at path
// fit on its disk: n when they all do, 0 when the disk is full (the write
// fails with ENOSPC), and what is left otherwise (a short write).
func Fit(path string, n int) int {
	if active.Load() == 0 {
		return n
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range disks {
		if strings.HasPrefix(path, d.dir) {
			return d.take(n)
		}
	}
	return n
}

func (d *Disk) take(n int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := int64(n)
	if k > d.free {
		k = d.free
	}
	if k <= 0 {
		d.refused++
		return 0
	}
	d.free -= k
	return int(k)
}
