package clusterproc

import "syscall"

// sysProcAttr makes the kernel kill a child when the process that started it
// dies, so a crashed test or demo leaves no node or S3 server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
