//go:build !wasip1

package wasmkeep

import (
	"io"
	"os"
	"time"
	"unsafe"

	"github.com/wasmkeep/alarms/guest-sdk/internal/native"
)

// On a native build there is no wasm host. The imports go to native.Current,
// which package wasmkeeptest (and the SDK's own tests) set to a fake; while
// it is nil every call returns EPERM, as a call outside an event does. This
// lets a guest's code, the SDK's pointers included, run under go test on the
// build machine.

func init() {
	native.OnAlarm, native.OnRequest, native.OnInit = onAlarm, onRequest, onInit
}

const noHost = uint32(EPERM)

// hostNow is the fake host's clock when one is installed, else the machine's.
func hostNow() time.Time {
	if h := native.Current; h != nil {
		return h.Now()
	}
	return time.Now()
}

// logWriter is where logLine writes.
func logWriter() io.Writer {
	if native.Log != nil {
		return native.Log
	}
	return os.Stderr
}

func hostSetAlarm(atMs int64) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.SetAlarm(atMs)
}

func hostGetAlarm(out *int64) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.GetAlarm(out)
}

func hostClearAlarm() uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.ClearAlarm()
}

func hostRequestRead(buf *byte, bufLen uint32) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.RequestRead(unsafe.Slice(buf, bufLen))
}

func hostResponseWrite(buf *byte, n uint32) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.ResponseWrite(unsafe.Slice(buf, n))
}

func hostKVGet(key *byte, keyLen uint32, buf *byte, bufLen uint32, outLen *uint32) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.KVGet(unsafe.String(key, keyLen), unsafe.Slice(buf, bufLen), outLen)
}

func hostKVPut(key *byte, keyLen uint32, val *byte, valLen uint32) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.KVPut(unsafe.String(key, keyLen), unsafe.Slice(val, valLen))
}

func hostKVDelete(key *byte, keyLen uint32) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.KVDelete(unsafe.String(key, keyLen))
}

func hostActorID(buf *byte, bufLen uint32, outLen *uint32) uint32 {
	if native.Current == nil {
		return noHost
	}
	return native.Current.ActorID(unsafe.Slice(buf, bufLen), outLen)
}
