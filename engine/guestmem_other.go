//go:build !linux

package engine

// reservation: instances' memories are Go slices here, copied when they
// grow (see guestmem_linux.go).
type reservation struct{}

func reserve(uint64) *reservation       { return nil }
func (*reservation) grow(uint64) []byte { return nil }
func (*reservation) release()           {}
func (*reservation) scrub(uint64) bool  { return false }
func (*reservation) shrink(uint64) bool { return false }
func (*reservation) size() uint64       { return 0 }
func (*reservation) held() uint64       { return 0 }
