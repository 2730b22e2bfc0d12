package engine

import (
	"syscall"
	_ "unsafe" // go:linkname
)

// A goroutine blocked in fdatasync(2) keeps its processor (P) until the
// runtime's monitor takes it back, 20 µs or more into the call, and the
// sync itself lasts 60 to 100 µs on a good disk: while the journal's
// flusher syncs thousands of times a second, a node of two processors
// runs its guests on little more than one. The runtime hands the
// processor off at once for the calls it knows will block (its own
// notetsleepg does so), through entersyscallblock, which it keeps
// callable from outside for this use (go.dev/issue/67401).
//
//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// fdatasyncHandingOff is fdatasync(fd), the processor handed to another
// thread for the call's length. Only nosplit functions may run between
// entersyscallblock and exitsyscall: syscall.RawSyscall is one.
//
//go:nosplit
func fdatasyncHandingOff(fd int) syscall.Errno {
	entersyscallblock()
	_, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, uintptr(fd), 0, 0)
	exitsyscall()
	return e
}

// handoff says when the journal's sync hands its processor off.
type handoff int

const (
	handoffAuto   handoff = iota // while more guest calls wait for a slot than commits for the sync
	handoffAlways                // every sync (tests)
	handoffNever                 // no sync (tests)
)

// journalHandoff is the journals' handoff (the tests set it).
var journalHandoff = handoffAuto

// handsOff reports whether a sync that waiting commits wait for hands its
// processor off. It does while more guest calls wait for a slot than
// commits wait for the sync: the processor then has more work that does
// not wait for the sync than work that does. Otherwise the sync's own
// waiters are the work: the flusher keeps its processor, so that they are
// woken the moment the disk returns rather than once a processor is free
// again. Measured on two processors, handing off every sync cost eight
// busy actors about a quarter of their events, and keeping the processor
// at every sync cost a thousand about as much (docs/benchmarks.md, "A
// sync that hands its processor off").
func handsOff(waiting int64) bool {
	switch journalHandoff {
	case handoffAlways:
		return true
	case handoffNever:
		return false
	}
	return queuedCalls.Load() > waiting
}

// datasync makes fd's data durable, as fdatasync(2) does, for a sync of
// the journal.
func (j *journal) datasync(fd int) error {
	if !handsOff(j.waiting.Load()) {
		return fdatasync(fd)
	}
	j.handoffs.Add(1)
	e := fdatasyncHandingOff(fd)
	for e == syscall.EINTR {
		e = fdatasyncHandingOff(fd)
	}
	if e != 0 {
		return e
	}
	return nil
}
