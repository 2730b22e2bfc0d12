package s3

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/wasmkeep/alarms/bucket"
)

// ListFolders lists the folders directly under prefix (see bucket.Bucket)
// with delimited ListObjectsV2 pages, following continuation tokens.
func (b *Bucket) ListFolders(ctx context.Context, prefix string, limit int) ([]string, error) {
	f, _, err := b.ListFoldersPaged(ctx, prefix, limit)
	return f, err
}

// ListFoldersPaged is ListFolders that also returns how many LIST requests
// it sent (see bucket.PagedLister).
func (b *Bucket) ListFoldersPaged(ctx context.Context, prefix string, limit int) (_ []string, _ int, err error) {
	ctx, end := b.span(ctx, bucket.OpList, prefix)
	defer func() { end(err) }()
	ctx, n := withAttempts(ctx)
	if err := bucket.CheckLimit(limit); err != nil {
		return nil, 0, b.fail(bucket.OpList, prefix, n, err)
	}
	var out []string
	var token *string
	pages := 0
	for len(out) < limit {
		in := &awss3.ListObjectsV2Input{
			Bucket:            &b.name,
			Prefix:            &prefix,
			Delimiter:         aws.String("/"),
			MaxKeys:           aws.Int32(int32(min(bucket.MaxPage, limit-len(out)))),
			ContinuationToken: token,
		}
		pages++
		b.pages.Add(1)
		res, err := b.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, pages, b.fail(bucket.OpList, prefix, n, classify(err))
		}
		for _, cp := range res.CommonPrefixes {
			f := aws.ToString(cp.Prefix)
			if !strings.HasPrefix(f, prefix) || !strings.HasSuffix(f, "/") || (len(out) > 0 && f <= out[len(out)-1]) {
				return nil, pages, b.fail(bucket.OpList, prefix, n,
					fmt.Errorf("the store listed folder %q: out of order or outside the prefix", f))
			}
			out = append(out, f)
		}
		if !aws.ToBool(res.IsTruncated) || res.NextContinuationToken == nil {
			break
		}
		token = res.NextContinuationToken
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, pages, nil
}
