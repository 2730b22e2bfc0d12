//go:build !wasip1

package wasmkeep

import "unsafe"

// On a native build there is no wasm host. The imports go to nativeHost,
// which the package's tests set to a fake; while it is nil every call returns
// EPERM, as a call outside an event does. This lets the SDK's own code,
// pointers included, run under go test on the build machine.

// hostAPI is the host as the native build's imports see it.
type hostAPI interface {
	setAlarm(atMs int64) uint32
	getAlarm(out *int64) uint32
	clearAlarm() uint32
	requestRead(buf []byte) uint32
	responseWrite(buf []byte) uint32
	kvGet(key string, buf []byte, outLen *uint32) uint32
	kvPut(key string, val []byte) uint32
	kvDelete(key string) uint32
}

var nativeHost hostAPI

const noHost = uint32(EPERM)

func hostSetAlarm(atMs int64) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.setAlarm(atMs)
}

func hostGetAlarm(out *int64) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.getAlarm(out)
}

func hostClearAlarm() uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.clearAlarm()
}

func hostRequestRead(buf *byte, bufLen uint32) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.requestRead(unsafe.Slice(buf, bufLen))
}

func hostResponseWrite(buf *byte, n uint32) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.responseWrite(unsafe.Slice(buf, n))
}

func hostKVGet(key *byte, keyLen uint32, buf *byte, bufLen uint32, outLen *uint32) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.kvGet(unsafe.String(key, keyLen), unsafe.Slice(buf, bufLen), outLen)
}

func hostKVPut(key *byte, keyLen uint32, val *byte, valLen uint32) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.kvPut(unsafe.String(key, keyLen), unsafe.Slice(val, valLen))
}

func hostKVDelete(key *byte, keyLen uint32) uint32 {
	if nativeHost == nil {
		return noHost
	}
	return nativeHost.kvDelete(unsafe.String(key, keyLen))
}
