//go:build !linux

package s3test

import "syscall"

// sysProcAttr is the default elsewhere: use Run to stop the server.
func sysProcAttr() *syscall.SysProcAttr { return nil }
