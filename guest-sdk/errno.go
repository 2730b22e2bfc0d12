package wasmkeep

import "strconv"

// Errno is a result code the host returns from an import, numbered as in
// WASI preview 1. It implements error; errors.Is(err, EINVAL) tells a caller
// which one an SDK call returned.
type Errno uint32

// The errnos the host returns. Their numbers are the ABI's (see abi/ABI.md).
const (
	// E2BIG: a key or value is longer than the host accepts.
	E2BIG Errno = 1
	// EFAULT: a pointer and length are not inside the guest's memory. The SDK
	// passes only its own buffers, so this means an SDK or host bug.
	EFAULT Errno = 21
	// EINVAL: an argument is out of range, such as an alarm time before 1970
	// or after the latest time the host can index.
	EINVAL Errno = 28
	// EIO: the host could not read or write the actor's database.
	EIO Errno = 29
	// ENOENT: no alarm is set, or no value is stored under the key. The SDK
	// reports it as ErrNotSet or ErrNotFound.
	ENOENT Errno = 44
	// EPERM: called outside an event, for example from a package's init
	// function, which runs while the host starts the instance.
	EPERM Errno = 63
)

// Error returns the errno's name and what it means, such as
// "EINVAL (invalid argument)".
func (e Errno) Error() string {
	switch e {
	case E2BIG:
		return "E2BIG (key or value too long)"
	case EFAULT:
		return "EFAULT (bad address)"
	case EINVAL:
		return "EINVAL (invalid argument)"
	case EIO:
		return "EIO (host database error)"
	case ENOENT:
		return "ENOENT (not found)"
	case EPERM:
		return "EPERM (not within an event)"
	}
	return "errno " + strconv.FormatUint(uint64(e), 10)
}

// Name returns the errno's short name, such as "EINVAL", or "errno N" for a
// number this SDK does not know.
func (e Errno) Name() string {
	switch e {
	case E2BIG:
		return "E2BIG"
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
	}
	return "errno " + strconv.FormatUint(uint64(e), 10)
}

// HostError is the error an SDK call returns when the host refuses it: Op
// names the import (such as "set-alarm") and Errno the host's reason.
// errors.Is(err, EIO) and errors.As(err, new(Errno)) see the errno.
type HostError struct {
	// Op is the name of the import that failed, as in the ABI.
	Op string
	// Errno is what the host returned.
	Errno Errno
}

// Error returns "wasmkeep: <op>: <errno>".
func (e *HostError) Error() string {
	return "wasmkeep: " + e.Op + ": " + e.Errno.Error()
}

// Unwrap returns the errno.
func (e *HostError) Unwrap() error { return e.Errno }

// notFound is the type of ErrNotSet and ErrNotFound: a fixed message that
// unwraps to ENOENT.
type notFound struct{ msg string }

func (e *notFound) Error() string { return e.msg }
func (e *notFound) Unwrap() error { return ENOENT }

var (
	// ErrNotSet is what GetAlarm returns when the actor has no alarm.
	// errors.Is(ErrNotSet, ENOENT) is true.
	ErrNotSet error = &notFound{"wasmkeep: no alarm is set"}
	// ErrNotFound is what Get returns when no value is stored under the key.
	// errors.Is(ErrNotFound, ENOENT) is true.
	ErrNotFound error = &notFound{"wasmkeep: no value under that key"}
)

// check turns the host's result into nil or a *HostError.
func check(op string, errno uint32) error {
	if errno == 0 {
		return nil
	}
	return &HostError{Op: op, Errno: Errno(errno)}
}
