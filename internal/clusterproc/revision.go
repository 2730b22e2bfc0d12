package clusterproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoRevision is returned by BuildRevision when the repository holds no
// such commit (a shallow clone, a source tree without its history).
var ErrNoRevision = errors.New("clusterproc: revision not in this repository")

// BuildRevision compiles cmd/keepnode as it was at the commit rev of the
// repository around the working directory (ModuleRoot) into dir, and
// returns the binary's path and the commit's full hash. The commit's tree
// is exported with git archive into dir/src-<hash> (the repository's own
// work tree is left alone) and built there with the Go toolchain on PATH,
// its modules from the module cache or proxy. The binary is stamped with
// node.Version "<rev>" and node.Revision "<hash>" (-ldflags -X), which a
// build of a tree without .git records no other way. Tests of a rolling
// upgrade run it beside Build's binary: the earlier build and this one on
// one bucket.
func BuildRevision(ctx context.Context, rev, dir string) (bin, hash string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Errorf("%w: %s (git rev-parse: %v)", ErrNoRevision, rev, err)
	}
	hash = strings.TrimSpace(string(out))
	src := filepath.Join(dir, "src-"+hash[:12])
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	archive := filepath.Join(dir, "src-"+hash[:12]+".tar")
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", "-o", archive, hash).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("clusterproc: git archive %s: %w\n%s", rev, err, bytes.TrimSpace(out))
	}
	defer os.Remove(archive)
	if out, err := exec.CommandContext(ctx, "tar", "-xf", archive, "-C", src).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("clusterproc: unpack %s: %w\n%s", rev, err, bytes.TrimSpace(out))
	}
	bin = filepath.Join(dir, "keepnode-"+hash[:12])
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", stamp(rev, hash), "-o", bin, "./cmd/keepnode")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("clusterproc: go build %s at %s: %w\n%s", KeepnodePackage, rev, err, bytes.TrimSpace(out))
	}
	return bin, hash, nil
}

// stamp is the -ldflags value that sets node.Version and node.Revision.
func stamp(version, revision string) string {
	var flags []string
	if version != "" {
		flags = append(flags, "-X "+Module+"/node.Version="+version)
	}
	if revision != "" {
		flags = append(flags, "-X "+Module+"/node.Revision="+revision)
	}
	return strings.Join(flags, " ")
}

// HeadRevision is the commit the repository around the working directory
// has checked out, with "+dirty" when its work tree has changes ("" when
// it is no git repository).
func HeadRevision(ctx context.Context) string {
	root, err := ModuleRoot()
	if err != nil {
		return ""
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev
}
