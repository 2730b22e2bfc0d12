// Package abi is the contract between wasmkeep hosts and actor guests: the
// import module and function names, the wasm signatures, the errno values and
// the export names; ABI.md beside this file gives every signature in .wat.
// It also holds the one actor identity every package shares, [ActorID], with
// its limits and encoding, and the one error about an actor, [ActorError].
// It depends on nothing of this module.
package abi

// Import modules.
const (
	// AlarmModule is the import module of the alarm functions.
	AlarmModule = "wasmkeep:alarm"
	// ActorModule is the import module of the request and data functions.
	ActorModule = "wasmkeep:actor"
)

// Functions of AlarmModule.
const (
	// FuncSetAlarm: (param $at_ms i64) (result i32 errno).
	FuncSetAlarm = "set-alarm"
	// FuncGetAlarm: (param $out_ptr i32) (result i32 errno).
	FuncGetAlarm = "get-alarm"
	// FuncClearAlarm: (result i32 errno).
	FuncClearAlarm = "clear-alarm"
)

// Functions of ActorModule.
const (
	// FuncRequestRead: (param $buf i32) (param $buf_len i32) (result i32 errno).
	FuncRequestRead = "request-read"
	// FuncResponseWrite: (param $buf i32) (param $len i32) (result i32 errno).
	FuncResponseWrite = "response-write"
	// FuncKVGet: (param $key i32) (param $key_len i32) (param $buf i32)
	// (param $buf_len i32) (param $out_len_ptr i32) (result i32 errno).
	FuncKVGet = "kv-get"
	// FuncKVPut: (param $key i32) (param $key_len i32) (param $val i32)
	// (param $val_len i32) (result i32 errno).
	FuncKVPut = "kv-put"
	// FuncKVDelete: (param $key i32) (param $key_len i32) (result i32 errno).
	FuncKVDelete = "kv-delete"
	// FuncActorID: (param $buf i32) (param $buf_len i32) (param $out_len_ptr i32)
	// (result i32 errno). It gives the actor's identity as
	// "tenant/class/name", at most MaxActorIDLen bytes.
	FuncActorID = "actor-id"
)

// Exports a guest provides.
const (
	// ExportOnAlarm: (param $scheduled_ms i64) (param $retry_count i32) (result i32).
	// Required of every guest that imports AlarmModule.
	ExportOnAlarm = "on-alarm"
	// ExportOnRequest: (param $req_len i32) (result i32). Optional.
	ExportOnRequest = "on-request"
	// ExportOnInit: (result i32). Optional; run once per actor, recorded.
	ExportOnInit = "on-init"
	// ExportInitialize is the reactor's start function (Go c-shared guests).
	ExportInitialize = "_initialize"
)

// Wasm value type codes, as in the binary format (and wazero's api.ValueType).
const (
	I32 byte = 0x7f
	I64 byte = 0x7e
)

// Signatures of the exports as value type codes.
var (
	OnAlarmParams    = []byte{I64, I32}
	OnAlarmResults   = []byte{I32}
	OnRequestParams  = []byte{I32}
	OnRequestResults = []byte{I32}
	OnInitParams     = []byte{}
	OnInitResults    = []byte{I32}
)

// Signatures in .wat, for error messages and documentation.
const (
	OnAlarmSignature   = "(func (param $scheduled_ms i64) (param $retry_count i32) (result i32))"
	OnRequestSignature = "(func (param $req_len i32) (result i32))"
	OnInitSignature    = "(func (result i32))"
)

// Errno is a result code of an import, numbered as in WASI preview 1.
type Errno = uint32

// Errno values the imports return.
const (
	ESUCCESS Errno = 0
	// EFAULT: a pointer and length are not inside the guest's memory.
	EFAULT Errno = 21
	// EINVAL: an argument is out of range (a time outside 0..MaxAlarmMillis).
	EINVAL Errno = 28
	// EIO: the host could not read or write the actor's database.
	EIO Errno = 29
	// ENOENT: no alarm is set; no value under that key.
	ENOENT Errno = 44
	// EPERM: called outside an event (for example from _initialize).
	EPERM Errno = 63
	// E2BIG: a key or value is larger than the host accepts; a buffer is
	// too short for the identity actor-id writes.
	E2BIG Errno = 1
)

// Limits.
const (
	// MaxAlarmMillis is the latest alarm time, in Unix milliseconds: the 15
	// digits of the alarm index key.
	MaxAlarmMillis int64 = 999_999_999_999_999
	// MaxKeyLen is the longest key kv-put accepts, in bytes.
	MaxKeyLen = 1024
	// MaxValueLen is the longest value kv-put accepts, in bytes.
	MaxValueLen = 1 << 20
	// MaxActorIDLen is the longest identity actor-id writes, in bytes:
	// "tenant/class/name" at the longest tenant, class and name an actor
	// may have (see ActorID.Validate). A buffer this large always fits.
	MaxActorIDLen = MaxTenantLen + 1 + MaxClassLen + 1 + MaxNameLen
)

// ErrnoName gives the short name of an errno, for messages.
func ErrnoName(e Errno) string {
	switch e {
	case ESUCCESS:
		return "ESUCCESS"
	case EFAULT:
		return "EFAULT"
	case EINVAL:
		return "EINVAL"
	case EIO:
		return "EIO"
	case ENOENT:
		return "ENOENT"
	case EPERM:
		return "EPERM"
	case E2BIG:
		return "E2BIG"
	}
	return "errno " + itoa(e)
}

func itoa(e Errno) string {
	if e == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for e > 0 {
		i--
		b[i] = byte('0' + e%10)
		e /= 10
	}
	return string(b[i:])
}
