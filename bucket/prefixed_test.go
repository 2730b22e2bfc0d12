package bucket_test

import (
	"slices"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// A bucket seen from under a prefix behaves as a bucket of its own, on
// memory and on versitygw.
func TestPrefixedConformance(t *testing.T) {
	t.Run("mem", func(t *testing.T) {
		conformance(t, func(*testing.T) bucket.Bucket { return bucket.WithPrefix(bucket.NewMem(), "app/one/") })
		listFolders(t, func(*testing.T) bucket.Bucket { return bucket.WithPrefix(bucket.NewMem(), "app/one/") })
	})
	t.Run("s3", func(t *testing.T) {
		conformance(t, func(t *testing.T) bucket.Bucket { return bucket.WithPrefix(s3test.Start(t).Bucket, "app/one/") })
		listFolders(t, func(t *testing.T) bucket.Bucket { return bucket.WithPrefix(s3test.Start(t).Bucket, "app/one/") })
	})
}

// Two prefixes in one bucket never see each other's keys, and every key
// lives under its prefix in the bucket.
func TestPrefixesDoNotSeeEachOther(t *testing.T) {
	for name, newBucket := range map[string]func(t *testing.T) bucket.Bucket{
		"mem": func(*testing.T) bucket.Bucket { return bucket.NewMem() },
		"s3":  func(t *testing.T) bucket.Bucket { return s3test.Start(t).Bucket },
	} {
		t.Run(name, func(t *testing.T) {
			b := newBucket(t)
			one, two := bucket.WithPrefix(b, "one/"), bucket.WithPrefix(b, "two/")
			putAll(t, one, []string{"alarms/t/1", "alarms/u/2"})
			putAll(t, two, []string{"alarms/t/3"})
			if got, err := one.List(ctx(t), "alarms/", "", 100); err != nil || !slices.Equal(got, []string{"alarms/t/1", "alarms/u/2"}) {
				t.Fatalf("one lists %q, %v; want its own two keys", got, err)
			}
			if got, err := two.List(ctx(t), "", "", 100); err != nil || !slices.Equal(got, []string{"alarms/t/3"}) {
				t.Fatalf("two lists %q, %v; want its own key", got, err)
			}
			if got, err := two.ListFolders(ctx(t), "alarms/", 100); err != nil || !slices.Equal(got, []string{"alarms/t/"}) {
				t.Fatalf("two lists folders %q, %v; want its own", got, err)
			}
			if got, err := one.List(ctx(t), "alarms/", "alarms/t/1", 100); err != nil || !slices.Equal(got, []string{"alarms/u/2"}) {
				t.Fatalf("one lists after alarms/t/1: %q, %v", got, err)
			}
			if got, err := b.List(ctx(t), "", "", 100); err != nil || !slices.Equal(got, []string{"one/alarms/t/1", "one/alarms/u/2", "two/alarms/t/3"}) {
				t.Fatalf("the bucket holds %q, %v; want every key under its prefix", got, err)
			}
		})
	}
}
