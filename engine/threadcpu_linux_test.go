package engine_test

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU is the calling thread's CPU time (0 where it cannot be read).
func threadCPU() time.Duration { return clockCPU(3) } // CLOCK_THREAD_CPUTIME_ID

// processCPU is the CPU time of all the process's threads (0 where it
// cannot be read).
func processCPU() time.Duration { return clockCPU(2) } // CLOCK_PROCESS_CPUTIME_ID

func clockCPU(clock uintptr) time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
