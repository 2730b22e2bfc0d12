package bucket_test

import (
	"os"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

func TestMemConformance(t *testing.T) {
	conformance(t, func(*testing.T) bucket.Bucket { return bucket.NewMem() })
}

func TestS3Conformance(t *testing.T) {
	conformance(t, func(t *testing.T) bucket.Bucket { return s3test.Start(t).Bucket })
}
