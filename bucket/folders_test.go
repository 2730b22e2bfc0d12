package bucket_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
)

func TestMemListFolders(t *testing.T) {
	listFolders(t, func(*testing.T) bucket.Bucket { return bucket.NewMem() })
}

func TestS3ListFolders(t *testing.T) {
	listFolders(t, func(t *testing.T) bucket.Bucket { return s3test.Start(t).Bucket })
}

// listFolders is what every FolderLister must do: S3's common prefixes
// for the delimiter "/", in order, with pages of 1,000 counted exactly.
func listFolders(t *testing.T, newBucket func(t *testing.T) bucket.Bucket) {
	t.Run("Shape", func(t *testing.T) {
		b := newBucket(t)
		putAll(t, b, []string{
			"alarms/a/1", "alarms/a/2/3", "alarms/a-/1", "alarms/a0/1", // '-' < '/' < '0'
			"alarms/b/x/y", "alarms/c", "alarms/d/",
			"alarmsx/q/1", "other/z/1", "alarm",
		})
		got, err := b.ListFolders(ctx(t), "alarms/", 100)
		want := []string{"alarms/a-/", "alarms/a/", "alarms/a0/", "alarms/b/", "alarms/d/"}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("ListFolders(alarms/) = %q, %v; want %q", got, err, want)
		}
		got, err = b.ListFolders(ctx(t), "alarms/", 2)
		if err != nil || !slices.Equal(got, want[:2]) {
			t.Fatalf("ListFolders(alarms/, limit 2) = %q, %v; want %q", got, err, want[:2])
		}
		got, err = b.ListFolders(ctx(t), "alarms/a/", 100)
		if err != nil || !slices.Equal(got, []string{"alarms/a/2/"}) {
			t.Fatalf("ListFolders(alarms/a/) = %q, %v; want [alarms/a/2/]", got, err)
		}
		got, err = b.ListFolders(ctx(t), "none/", 100)
		if err != nil || len(got) != 0 {
			t.Fatalf("ListFolders(none/) = %q, %v; want nothing", got, err)
		}
		if _, err := b.ListFolders(ctx(t), "alarms/", 0); err == nil {
			t.Fatal("ListFolders with limit 0: no error")
		}
	})

	// 2,100 folders, some holding many keys: the folders come in pages of
	// 1,000 however many keys each holds, and Counting counts the pages.
	t.Run("Pages", func(t *testing.T) {
		c := bucket.NewCounting(newBucket(t))
		const n = 2100
		var keys, want []string
		for i := range n {
			f := fmt.Sprintf("idx/t%05d/", i)
			want = append(want, f)
			keys = append(keys, f+"a")
			if i%500 == 0 {
				for j := range 30 {
					keys = append(keys, fmt.Sprintf("%sb%02d", f, j))
				}
			}
		}
		putAll(t, c, keys)
		for _, tc := range []struct {
			limit int
			want  []string
			pages int64
		}{
			{10_000, want, 3}, // 1,000 + 1,000 + 100
			{1500, want[:1500], 2},
			{1000, want[:1000], 1},
			{1, want[:1], 1},
		} {
			c.Reset()
			got, err := c.ListFolders(ctx(t), "idx/", tc.limit)
			if err != nil {
				t.Fatalf("ListFolders(limit %d): %v", tc.limit, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ListFolders(limit %d) returned %d folders (%q...), want %d", tc.limit, len(got), head(got), len(tc.want))
			}
			if want := (bucket.Counts{List: 1, ListPages: tc.pages}); c.Counts() != want {
				t.Errorf("ListFolders(limit %d): counts = %+v, want %+v", tc.limit, c.Counts(), want)
			}
		}
	})
}
