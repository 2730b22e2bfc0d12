package bucket

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// folderPager is implemented by buckets that report how many LIST requests
// a ListFolders call sent; Counting uses it.
type folderPager interface {
	listFoldersPaged(ctx context.Context, prefix string, limit int) (folders []string, pages int, err error)
}

// ListFolders lists the folders directly under prefix (see Bucket).
// Each page is one request and meets the fault hook (Op.Delimiter "/").
func (m *Mem) ListFolders(ctx context.Context, prefix string, limit int) ([]string, error) {
	f, _, err := m.listFoldersPaged(ctx, prefix, limit)
	return f, err
}

func (m *Mem) listFoldersPaged(ctx context.Context, prefix string, limit int) ([]string, int, error) {
	op := m.nextOp(Op{Kind: OpList, Prefix: prefix, Delimiter: "/", Limit: limit})
	if err := checkLimit(limit); err != nil {
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

// ListFolders lists the folders directly under prefix (see Bucket)
// with delimited ListObjectsV2 pages, following continuation tokens.
func (b *S3) ListFolders(ctx context.Context, prefix string, limit int) ([]string, error) {
	f, _, err := b.listFoldersPaged(ctx, prefix, limit)
	return f, err
}

func (b *S3) listFoldersPaged(ctx context.Context, prefix string, limit int) ([]string, int, error) {
	ctx, n := withAttempts(ctx)
	if err := checkLimit(limit); err != nil {
		return nil, 0, b.fail(OpList, prefix, n, err)
	}
	var out []string
	var token *string
	pages := 0
	for len(out) < limit {
		in := &s3.ListObjectsV2Input{
			Bucket:            &b.name,
			Prefix:            &prefix,
			Delimiter:         aws.String("/"),
			MaxKeys:           aws.Int32(int32(min(MaxPage, limit-len(out)))),
			ContinuationToken: token,
		}
		pages++
		b.pages.Add(1)
		res, err := b.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, pages, b.fail(OpList, prefix, n, classify(err))
		}
		for _, cp := range res.CommonPrefixes {
			f := aws.ToString(cp.Prefix)
			if !strings.HasPrefix(f, prefix) || !strings.HasSuffix(f, "/") || (len(out) > 0 && f <= out[len(out)-1]) {
				return nil, pages, b.fail(OpList, prefix, n,
					fmt.Errorf("the store listed folder %q: out of order or outside the prefix", f))
			}
			out = append(out, f)
		}
		if !aws.ToBool(res.IsTruncated) || res.NextContinuationToken == nil {
			break
		}
		token = res.NextContinuationToken
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, pages, nil
}

// ListFolders counts one LIST call and the pages it sent, and forwards the
// call.
func (c *Counting) ListFolders(ctx context.Context, prefix string, limit int) ([]string, error) {
	f, _, err := c.listFoldersPaged(ctx, prefix, limit)
	return f, err
}

func (c *Counting) listFoldersPaged(ctx context.Context, prefix string, limit int) ([]string, int, error) {
	c.list.Add(1)
	var (
		folders []string
		pages   int
		err     error
	)
	if p, ok := c.inner.(folderPager); ok {
		folders, pages, err = p.listFoldersPaged(ctx, prefix, limit)
	} else {
		folders, err = c.inner.ListFolders(ctx, prefix, limit)
		pages = 1
	}
	c.listPages.Add(int64(pages))
	return folders, pages, err
}
