//go:build unix

package engine

import (
	"os"
	"syscall"
)

// removeFile removes the file at path with one system call: os.Remove
// tries rmdir(2) as well when unlink(2) fails, and a restore removes a
// WAL and a shared-memory file that are almost never there. The error is
// an *os.PathError (os.IsNotExist for a file that was not there).
func removeFile(path string) error {
	for {
		err := syscall.Unlink(path)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "remove", Path: path, Err: err}
		}
		return nil
	}
}

// renameFile renames a file with one system call: os.Rename reads the
// target's metadata first (to refuse a directory, which rename(2)
// refuses too).
func renameFile(from, to string) error {
	for {
		err := syscall.Rename(from, to)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
		}
		return nil
	}
}
