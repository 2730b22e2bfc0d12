package s3test

import "syscall"

// sysProcAttr makes the kernel kill versitygw when the test process dies, so
// a test binary that exits without Run (or is killed) leaves no server.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
