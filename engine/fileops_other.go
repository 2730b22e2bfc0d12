//go:build !unix

package engine

import "os"

func removeFile(path string) error { return os.Remove(path) }

func renameFile(from, to string) error { return os.Rename(from, to) }
