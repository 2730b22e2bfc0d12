//go:build !unix

package engine

import "os"

// scanFile is a file the scan reads.
type scanFile struct{ *os.File }

func openScanFile(path string) (scanFile, error) {
	f, err := os.Open(path)
	return scanFile{f}, err
}

func (f scanFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
