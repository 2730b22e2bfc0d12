package bucket

import (
	"context"
	"sort"
	"strings"
)

// ListFolders lists the folders directly under prefix (see Bucket).
// Each page is one request and meets the fault hook (Op.Delimiter "/").
func (m *Mem) ListFolders(ctx context.Context, prefix string, limit int) ([]string, error) {
	f, _, err := m.ListFoldersPaged(ctx, prefix, limit)
	return f, err
}

// ListFoldersPaged is ListFolders that also returns how many LIST requests
// (pages) it sent; see PagedLister.
func (m *Mem) ListFoldersPaged(ctx context.Context, prefix string, limit int) ([]string, int, error) {
	op := m.nextOp(Op{Kind: OpList, Prefix: prefix, Delimiter: "/", Limit: limit})
	if err := CheckLimit(limit); err != nil {
		return nil, 0, m.fail(op, err)
	}
	var out []string
	pages := 0
	from := prefix // the first key the next page may hold
	for {
		pageOp := op
		if pages > 0 {
			pageOp = m.nextOp(Op{Kind: OpList, Prefix: prefix, Delimiter: "/", StartAfter: from, Limit: limit - len(out)})
		}
		pages++
		m.pages.Add(1)
		if _, err := m.admit(ctx, pageOp); err != nil {
			return nil, pages, err
		}
		folders, next, more := m.folderPage(prefix, from, min(MaxPage, limit-len(out)))
		out = append(out, folders...)
		if !more || len(out) >= limit {
			return out, pages, nil
		}
		from = next
	}
}

// folderPage reads one delimited page: up to n items (folders and keys
// directly under prefix) from the key from on. It returns the folders, the
// first key of the next page, and whether there is one.
func (m *Mem) folderPage(prefix, from string, n int) (folders []string, next string, more bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.SearchStrings(m.keys, max(from, prefix))
	items := 0
	for i < len(m.keys) {
		k := m.keys[i]
		if !strings.HasPrefix(k, prefix) {
			return folders, "", false
		}
		if items == n {
			return folders, k, true
		}
		items++
		seg, ok := strings.CutPrefix(k, prefix)
		j := strings.IndexByte(seg, '/')
		if !ok || j < 0 {
			i++ // a key directly under prefix: counts against the page only
			continue
		}
		folder := prefix + seg[:j+1]
		folders = append(folders, folder)
		// Past every key in the folder: the folder's last byte is '/', so
		// the first key after them starts folder[:len-1] + '0'.
		end := folder[:len(folder)-1] + "0"
		i = sort.SearchStrings(m.keys, end)
	}
	return folders, "", false
}

// ListFolders counts one LIST call and the pages it sent, and forwards the
// call.
func (c *Counting) ListFolders(ctx context.Context, prefix string, limit int) ([]string, error) {
	f, _, err := c.ListFoldersPaged(ctx, prefix, limit)
	return f, err
}

// ListFoldersPaged is ListFolders that also returns how many LIST requests
// the wrapped bucket sent (one if it does not say); see PagedLister.
func (c *Counting) ListFoldersPaged(ctx context.Context, prefix string, limit int) ([]string, int, error) {
	c.list.Add(1)
	var (
		folders []string
		pages   int
		err     error
	)
	if p, ok := c.inner.(PagedLister); ok {
		folders, pages, err = p.ListFoldersPaged(ctx, prefix, limit)
	} else {
		folders, err = c.inner.ListFolders(ctx, prefix, limit)
		pages = 1
	}
	c.listPages.Add(int64(pages))
	return folders, pages, err
}
