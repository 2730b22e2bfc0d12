package engine

// SetIOHook sets the hook told of each write, truncation and sync of an
// actor's file (Linux), for the power-loss test.
func SetIOHook(h func(op, name string, off, n int64)) (restore func()) {
	prev := ioHook
	ioHook = h
	return func() { ioHook = prev }
}
