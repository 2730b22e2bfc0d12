//go:build !linux

package engine

import "github.com/ncruces/go-sqlite3/vfs"

// openStoreFile: other platforms open an actor's files through the "os"
// VFS.
func openStoreFile(string, vfs.OpenFlag) (vfs.File, error) { return nil, errNoStoreFile }
