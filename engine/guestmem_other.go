//go:build !linux

package engine

import "errors"

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

// imageMemory: an image's memory is in its module's data segments here,
// copied into each instance by wazero (see guestmem_image_linux.go).
type imageMemory struct{}

func newImageMemory([]byte) (*imageMemory, error) {
	return nil, errors.New("images are mapped copy-on-write on Linux only")
}
func (*imageMemory) bytes() uint64              { return 0 }
func (*imageMemory) copyTo([]byte)              {}
func (*reservation) mapImage(*imageMemory) bool { return false }
func (*reservation) mapped() *imageMemory       { return nil }
