package sweeper

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/wasmkeep/alarms/alarmindex"
)

// FolderLister lists the folders directly under a prefix: a LIST with the
// delimiter "/" (bucket.Bucket.ListFolders).
type FolderLister interface {
	ListFolders(ctx context.Context, prefix string, limit int) ([]string, error)
}

// IndexTenants finds every tenant that has entries in the index, each
// time it is asked: one delimited LIST of the index root ("alarms/") per
// 1,000 tenants, however many entries each holds. A node that sweeps with
// it needs no list of tenants: an alarm of a tenant it never saw is found.
type IndexTenants struct {
	Lister FolderLister
}

// Tenants lists the index root's folders and returns their tenants, in
// byte order.
func (t IndexTenants) Tenants(ctx context.Context) ([]string, error) {
	folders, err := t.Lister.ListFolders(ctx, alarmindex.Root, math.MaxInt32)
	if err != nil {
		return nil, fmt.Errorf("finding the tenants of the alarm index: %w", err)
	}
	out := make([]string, 0, len(folders))
	for _, f := range folders {
		tenant := strings.TrimSuffix(strings.TrimPrefix(f, alarmindex.Root), "/")
		// A folder the store lists is a non-empty segment: its keys are
		// the walk's to judge (one that is no index key is skipped and
		// logged there).
		out = append(out, tenant)
	}
	return out, nil
}
