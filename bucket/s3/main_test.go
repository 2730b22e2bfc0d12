package s3_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// TestMain stops the shared S3 server (versitygw) when the tests end. The
// Bucket conformance tests of this client are in package bucket, with the
// in-memory bucket's.
func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func mustPut(t *testing.T, b bucket.Bucket, key string, body []byte, cond bucket.Cond) string {
	t.Helper()
	etag, err := b.Put(ctx(t), key, body, cond)
	if err != nil {
		t.Fatalf("Put(%q, %+v): %v", key, cond, err)
	}
	if etag == "" {
		t.Fatalf("Put(%q) returned no ETag", key)
	}
	return etag
}

func mustGet(t *testing.T, b bucket.Bucket, key string) []byte {
	t.Helper()
	body, _, err := b.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return body
}

// putAll uploads empty objects under keys from a few goroutines.
func putAll(t *testing.T, b bucket.Bucket, keys []string) {
	t.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				if _, err := b.Put(ctx(t), keys[i], nil, bucket.Cond{}); err != nil {
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
