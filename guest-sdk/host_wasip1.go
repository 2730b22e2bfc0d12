//go:build wasip1

package wasmkeep

import (
	"io"
	"os"
	"time"
)

// hostNow is the host's clock: WASI's realtime clock, which the host sets
// to its own.
func hostNow() time.Time { return time.Now() }

// logWriter is where logLine writes: standard error, which the host may
// collect in its logs.
func logWriter() io.Writer { return os.Stderr }

// The host's imports (see abi/ABI.md in the wasmkeep alarms module). Each
// returns an errno; pointers are addresses in the guest's memory.

//go:wasmimport wasmkeep:alarm set-alarm
func hostSetAlarm(atMs int64) uint32

//go:wasmimport wasmkeep:alarm get-alarm
func hostGetAlarm(out *int64) uint32

//go:wasmimport wasmkeep:alarm clear-alarm
func hostClearAlarm() uint32

//go:wasmimport wasmkeep:actor request-read
func hostRequestRead(buf *byte, bufLen uint32) uint32

//go:wasmimport wasmkeep:actor response-write
func hostResponseWrite(buf *byte, n uint32) uint32

//go:wasmimport wasmkeep:actor kv-get
func hostKVGet(key *byte, keyLen uint32, buf *byte, bufLen uint32, outLen *uint32) uint32

//go:wasmimport wasmkeep:actor kv-put
func hostKVPut(key *byte, keyLen uint32, val *byte, valLen uint32) uint32

//go:wasmimport wasmkeep:actor kv-delete
func hostKVDelete(key *byte, keyLen uint32) uint32

//go:wasmimport wasmkeep:actor actor-id
func hostActorID(buf *byte, bufLen uint32, outLen *uint32) uint32

// The exports the host calls. Every guest built with the SDK has all three,
// whichever handlers it registers.

//lint:ignore U1000 the host calls it: go:wasmexport exports it
//go:wasmexport on-alarm
func exportOnAlarm(scheduledMs int64, retryCount int32) int32 {
	return onAlarm(scheduledMs, retryCount)
}

//lint:ignore U1000 the host calls it: go:wasmexport exports it
//go:wasmexport on-request
func exportOnRequest(reqLen int32) int32 {
	return onRequest(reqLen)
}

//lint:ignore U1000 the host calls it: go:wasmexport exports it
//go:wasmexport on-init
func exportOnInit() int32 {
	return onInit()
}
