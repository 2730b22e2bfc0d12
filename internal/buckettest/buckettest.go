// Package buckettest holds the helpers the tests of package bucket and of
// its S3 client (bucket/s3) share: a context bounded for a test, and PUTs
// and GETs that fail the test.
package buckettest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

// Ctx is the test's context, ended after two minutes at the most.
func Ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// MustPut puts body under key if cond holds and returns the ETag.
func MustPut(t *testing.T, b bucket.Bucket, key string, body []byte, cond bucket.Cond) string {
	t.Helper()
	etag, err := b.Put(Ctx(t), key, body, cond)
	if err != nil {
		t.Fatalf("Put(%q, %+v): %v", key, cond, err)
	}
	if etag == "" {
		t.Fatalf("Put(%q) returned no ETag", key)
	}
	return etag
}

// MustGet returns the body of key.
func MustGet(t *testing.T, b bucket.Bucket, key string) []byte {
	t.Helper()
	body, _, err := b.Get(Ctx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return body
}

// PutAll uploads empty objects under keys from a few goroutines.
func PutAll(t *testing.T, b bucket.Bucket, keys []string) {
	t.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				if _, err := b.Put(Ctx(t), keys[i], nil, bucket.Cond{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("uploading: %v", err)
	}
}
