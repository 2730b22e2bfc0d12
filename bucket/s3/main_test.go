package s3_test

import (
	"context"
	"os"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/buckettest"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// TestMain stops the shared S3 server (versitygw) when the tests end. The
// Bucket conformance tests of this client are in package bucket, with the
// in-memory bucket's.
func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

func ctx(t *testing.T) context.Context { return buckettest.Ctx(t) }

func mustPut(t *testing.T, b bucket.Bucket, key string, body []byte, cond bucket.Cond) string {
	t.Helper()
	return buckettest.MustPut(t, b, key, body, cond)
}

func mustGet(t *testing.T, b bucket.Bucket, key string) []byte {
	t.Helper()
	return buckettest.MustGet(t, b, key)
}

func putAll(t *testing.T, b bucket.Bucket, keys []string) {
	t.Helper()
	buckettest.PutAll(t, b, keys)
}
