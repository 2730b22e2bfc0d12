package bucket

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// ObjectInfo is what a listing says of one object.
type ObjectInfo struct {
	// Key is the object's key.
	Key string
	// ETag is the object's ETag, as Get and Put return it (quoted).
	ETag string
	// Size is the body's length in bytes.
	Size int64
	// LastModified is when the store last wrote the object, by the store's
	// clock; zero when the bucket does not say (Mem).
	LastModified time.Time
}

// InfoLister is implemented by buckets whose listings report each object's
// ETag and size: Mem, the S3 client, and Counting and Prefixed over one of
// them. One call costs what List costs: a LIST request per MaxPage objects.
type InfoLister interface {
	// ListInfo is List with each key's ObjectInfo.
	ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error)
}

// ListInfo lists up to limit objects under prefix after startAfter, in key
// order, with their ETags and sizes (see InfoLister). For a bucket that
// cannot say, it sends nothing and returns an error wrapping
// errors.ErrUnsupported.
func ListInfo(ctx context.Context, b Bucket, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	il, ok := b.(InfoLister)
	if !ok {
		return nil, fmt.Errorf("bucket %T: listing ETags: %w", b, errors.ErrUnsupported)
	}
	return il.ListInfo(ctx, prefix, startAfter, limit)
}

// ListInfo lists like List, with each object's ETag and size; each page is
// one request and meets the fault hook, as List's.
func (m *Mem) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	infos, _, err := listPages(m, ctx, prefix, startAfter, limit, m.infoPage, func(o ObjectInfo) string { return o.Key })
	return infos, err
}

// infoPage returns up to n objects under prefix after startAfter, read under
// one lock (as one request sees the store), and whether more follow.
func (m *Mem) infoPage(prefix, startAfter string, n int) ([]ObjectInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.SearchStrings(m.keys, max(startAfter, prefix))
	if i < len(m.keys) && m.keys[i] == startAfter {
		i++
	}
	var page []ObjectInfo
	for ; i < len(m.keys) && strings.HasPrefix(m.keys[i], prefix); i++ {
		if len(page) == n {
			return page, true
		}
		o := m.objs[m.keys[i]]
		page = append(page, ObjectInfo{Key: m.keys[i], ETag: o.etag, Size: int64(len(o.body))})
	}
	return page, false
}

// ListInfo counts one LIST call, and a page per MaxPage objects it
// returned (at least one), and forwards the call; when the wrapped bucket
// cannot list ETags (errors.ErrUnsupported, nothing sent) it counts
// nothing.
func (c *Counting) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	infos, err := ListInfo(ctx, c.inner, prefix, startAfter, limit)
	if errors.Is(err, errors.ErrUnsupported) {
		return infos, err
	}
	c.list.Add(1)
	c.listPages.Add(int64(max(1, (len(infos)+MaxPage-1)/MaxPage)))
	return infos, err
}

// ListInfo lists under prefix+sub and cuts the prefix off the keys.
func (p *Prefixed) ListInfo(ctx context.Context, sub, startAfter string, limit int) ([]ObjectInfo, error) {
	after := ""
	if startAfter != "" {
		after = p.prefix + startAfter
	}
	infos, err := ListInfo(ctx, p.inner, p.prefix+sub, after, limit)
	for i := range infos {
		infos[i].Key = strings.TrimPrefix(infos[i].Key, p.prefix)
	}
	return infos, err
}
