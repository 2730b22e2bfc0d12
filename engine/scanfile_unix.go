//go:build unix

package engine

import (
	"io"
	"os"
	"syscall"
)

// scanFile is a file the scan reads, opened with the bare system calls: an
// os.File would register each with the runtime's poller (two system calls
// more per open, for files that never block), and the scan opens two files
// per actor.
type scanFile int

func openScanFile(path string) (scanFile, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return scanFile(fd), nil
	}
}

// ReadAt reads len(b) bytes at off; fewer only with an error (io.EOF at
// the end of the file).
func (f scanFile) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := syscall.Pread(int(f), b[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

func (f scanFile) Size() (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f), &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

func (f scanFile) Close() error { return syscall.Close(int(f)) }
