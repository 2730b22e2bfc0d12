// Package iohook lets this module's tests watch, and hold, the engine's
// writes and syncs of an actor's files and of the node journal (Linux):
// the power-loss tests, and the tests that hold the journal's syncs to
// show what waits for them, in package engine and in the node alike.
package iohook

// Func, when set, is told of each write to an actor's file or a journal
// file before it is made ("write": n bytes at off), of each truncation
// before it is made ("truncate" to off), and of each sync once it is done
// ("sync", or "syncfs" of the data directory). Set it only while no
// engine runs, or through Set from a test.
var Func func(op, name string, off, n int64)

// Set sets Func to h and returns what restores the one before.
func Set(h func(op, name string, off, n int64)) (restore func()) {
	prev := Func
	Func = h
	return func() { Func = prev }
}
