package node_test

import (
	"os"
	"testing"

	"github.com/wasmkeep/alarms/internal/s3test"
)

// TestMain stops the shared S3 server (versitygw) when the tests end.
func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }
