package bucket_test

import (
	"errors"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// listInfo: a listing with ETags names the same objects as List, in the
// same order, each with the ETag Get returns and its size, pages and
// StartAfter included.
func listInfo(t *testing.T, b bucket.Bucket) {
	t.Helper()
	c := ctx(t)
	want := map[string]string{}
	for i, k := range []string{"n/a", "n/b", "n/c", "o/x"} {
		etag, err := b.Put(c, k, []byte(k+string(rune('0'+i))), bucket.Cond{})
		if err != nil {
			t.Fatal(err)
		}
		want[k] = etag
	}
	if _, err := b.Put(c, "n/empty", nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	infos, err := bucket.ListInfo(c, b, "n/", "n/a", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Key != "n/b" || infos[1].Key != "n/c" {
		t.Fatalf("ListInfo(n/ after n/a, 2) = %+v, want n/b and n/c", infos)
	}
	for _, in := range infos {
		_, getTag, err := b.Get(c, in.Key)
		if err != nil {
			t.Fatal(err)
		}
		if in.ETag != want[in.Key] || in.ETag != getTag || in.Size != 4 {
			t.Fatalf("%s: listed ETag %s size %d; PUT gave %s, GET %s, size 4", in.Key, in.ETag, in.Size, want[in.Key], getTag)
		}
	}
	all, err := bucket.ListInfo(c, b, "n/", "", 1000)
	if err != nil || len(all) != 4 || all[3].Key != "n/empty" || all[3].Size != 0 {
		t.Fatalf("ListInfo(n/) = %+v, %v; want n/a, n/b, n/c, n/empty (empty)", all, err)
	}
	etag, err := b.Put(c, "n/b", []byte("n/b9"), bucket.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := bucket.ListInfo(c, b, "n/b", "", 1)
	if err != nil || len(again) != 1 || again[0].ETag != etag || etag == want["n/b"] {
		t.Fatalf("after rewriting n/b: listed %+v, %v; PUT gave %s (was %s)", again, err, etag, want["n/b"])
	}
}

func TestListInfoMem(t *testing.T) {
	listInfo(t, bucket.NewMem())
	t.Run("prefixed", func(t *testing.T) { listInfo(t, bucket.WithPrefix(bucket.NewMem(), "root/")) })
	t.Run("counting", func(t *testing.T) {
		c := bucket.NewCounting(bucket.NewMem())
		listInfo(t, c)
		if got := c.Counts(); got.List != 3 || got.ListPages != 3 {
			t.Fatalf("counted %+v, want 3 LIST calls of one page each", got)
		}
	})
}

// On the S3 server the tests run against, the client's listing reports
// the ETags its GETs and PUTs do (quoted alike) and when each object was
// written.
func TestListInfoS3(t *testing.T) {
	b := s3test.Start(t).Bucket
	listInfo(t, b)
	infos, err := bucket.ListInfo(ctx(t), b, "n/", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.LastModified.IsZero() {
			t.Fatalf("%s: no last-modified time", in.Key)
		}
	}
	t.Run("prefixed", func(t *testing.T) { listInfo(t, bucket.WithPrefix(s3test.Start(t).Bucket, "root/")) })
}

// A bucket whose listings carry no ETags says so, and sends nothing.
func TestListInfoUnsupported(t *testing.T) {
	type keysOnly struct{ bucket.Bucket }
	c := bucket.NewCounting(keysOnly{bucket.NewMem()})
	if _, err := bucket.ListInfo(ctx(t), c, "", "", 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("err = %v, want errors.ErrUnsupported", err)
	}
	if got := c.Counts(); got != (bucket.Counts{}) {
		t.Fatalf("counted %+v, want nothing sent", got)
	}
}
