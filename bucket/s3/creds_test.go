package s3_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
)

// With no credentials anywhere, a request's error names the variables to
// set, not only the instance metadata service the SDK's chain ends at.
// Instance metadata is turned off, so no request leaves the machine; the
// endpoint refuses connections, and nothing is sent to it either.
func TestMissingCredentialsNameTheVariables(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_SHARED_CREDENTIALS_FILE": none, "AWS_CONFIG_FILE": none,
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
	} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := s3.New(ctx, "wasmkeep", s3.WithEndpoint("http://127.0.0.1:1"), s3.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"GET", func() error { _, _, err := b.Get(ctx, "k"); return err }},
		{"PUT", func() error { _, err := b.Put(ctx, "k", []byte("x"), bucket.Cond{}); return err }},
	} {
		err := op.run()
		if err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("%s with no credentials: %v; want an error naming AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", op.name, err)
		}
	}
}
