// Package native is the seam between the SDK and a host in a native build
// (go test on the build machine, where there is no WebAssembly host). The
// SDK's imports go to Current; package wasmkeeptest installs its fake there
// and calls the SDK's exports through OnAlarm, OnRequest and OnInit, which
// the SDK sets when it is linked into a native build. Under wasip1 nothing
// here is used.
package native

import (
	"io"
	"time"
)

// Host is the host as the SDK's imports see it in a native build: one method
// per import of abi/ABI.md, returning its errno, and the host's clock.
type Host interface {
	SetAlarm(atMs int64) uint32
	GetAlarm(out *int64) uint32
	ClearAlarm() uint32
	RequestRead(buf []byte) uint32
	ResponseWrite(buf []byte) uint32
	KVGet(key string, buf []byte, outLen *uint32) uint32
	KVPut(key string, val []byte) uint32
	KVDelete(key string) uint32
	// ActorID writes the actor's identity, "tenant/class/name", to buf and
	// its length at *outLen, as actor-id does (E2BIG when buf is short).
	ActorID(buf []byte, outLen *uint32) uint32
	// Now is the host's clock, which the SDK's Now returns.
	Now() time.Time
}

var (
	// Current is the host the SDK's imports call; while it is nil every
	// import returns EPERM, as one called outside an event does.
	Current Host
	// Log, when not nil, receives the lines the SDK writes for failed
	// events instead of standard error.
	Log io.Writer

	// The SDK's exports, set by the SDK's native build.
	OnAlarm   func(scheduledMs int64, retryCount int32) int32
	OnRequest func(reqLen int32) int32
	OnInit    func() int32
)
