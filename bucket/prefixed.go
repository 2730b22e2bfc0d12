package bucket

import (
	"context"
	"strings"
)

// Prefixed is a bucket seen from under a prefix: a key k given to it is the
// object prefix+k of the bucket it wraps, and List and ListFolders return
// keys with the prefix cut off. Errors name the full key. A cluster puts
// its alarm index under its own root this way, with the index's key format
// unchanged after the prefix.
type Prefixed struct {
	inner  Bucket
	prefix string
}

// WithPrefix returns b seen from under prefix ("" returns b itself).
func WithPrefix(b Bucket, prefix string) Bucket {
	if prefix == "" {
		return b
	}
	return &Prefixed{inner: b, prefix: prefix}
}

// Prefix returns the prefix.
func (p *Prefixed) Prefix() string { return p.prefix }

// Unwrap returns the wrapped bucket.
func (p *Prefixed) Unwrap() Bucket { return p.inner }

// Get gets prefix+key.
func (p *Prefixed) Get(ctx context.Context, key string) ([]byte, string, error) {
	return p.inner.Get(ctx, p.prefix+key)
}

// Head reads the ETag of prefix+key (see bucket.Head).
func (p *Prefixed) Head(ctx context.Context, key string) (string, error) {
	return Head(ctx, p.inner, p.prefix+key)
}

// Put puts prefix+key.
func (p *Prefixed) Put(ctx context.Context, key string, body []byte, cond Cond) (string, error) {
	return p.inner.Put(ctx, p.prefix+key, body, cond)
}

// Delete deletes prefix+key.
func (p *Prefixed) Delete(ctx context.Context, key string) error {
	return p.inner.Delete(ctx, p.prefix+key)
}

// DeleteBatch deletes prefix+key for each key and reports the keys
// deleted without the prefix.
func (p *Prefixed) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	deleted, err := p.inner.DeleteBatch(ctx, full)
	return p.cut(deleted), err
}

// List lists under prefix+sub and cuts the prefix off the keys.
func (p *Prefixed) List(ctx context.Context, sub, startAfter string, limit int) ([]string, error) {
	keys, _, err := p.ListPaged(ctx, sub, startAfter, limit)
	return keys, err
}

// ListPaged is List that also returns how many LIST requests the wrapped
// bucket sent (one if it does not say); see PagedLister.
func (p *Prefixed) ListPaged(ctx context.Context, sub, startAfter string, limit int) ([]string, int, error) {
	after := ""
	if startAfter != "" {
		after = p.prefix + startAfter
	}
	var (
		keys  []string
		pages = 1
		err   error
	)
	if pg, ok := p.inner.(PagedLister); ok {
		keys, pages, err = pg.ListPaged(ctx, p.prefix+sub, after, limit)
	} else {
		keys, err = p.inner.List(ctx, p.prefix+sub, after, limit)
	}
	return p.cut(keys), pages, err
}

// ListFolders lists the folders under prefix+sub and cuts the prefix off.
func (p *Prefixed) ListFolders(ctx context.Context, sub string, limit int) ([]string, error) {
	f, _, err := p.ListFoldersPaged(ctx, sub, limit)
	return f, err
}

// ListFoldersPaged is ListFolders that also returns how many LIST requests
// the wrapped bucket sent (one if it does not say); see PagedLister.
func (p *Prefixed) ListFoldersPaged(ctx context.Context, sub string, limit int) ([]string, int, error) {
	var (
		folders []string
		pages   = 1
		err     error
	)
	if fp, ok := p.inner.(PagedLister); ok {
		folders, pages, err = fp.ListFoldersPaged(ctx, p.prefix+sub, limit)
	} else {
		folders, err = p.inner.ListFolders(ctx, p.prefix+sub, limit)
	}
	return p.cut(folders), pages, err
}

func (p *Prefixed) cut(keys []string) []string {
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, p.prefix)
	}
	return keys
}
