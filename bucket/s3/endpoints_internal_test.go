package s3

import (
	"context"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// The cache's key must hold every endpoint parameter the SDK's rules read.
// A parameter this list does not know (a new SDK version) fails here, to be
// added to the key or, if the rules do not read it, to the left-out ones.
func TestEndpointParametersTheCacheKnows(t *testing.T) {
	inKey := []string{
		"Bucket", "Region", "Endpoint",
		"UseFIPS", "UseDualStack", "ForcePathStyle", "Accelerate", "UseGlobalEndpoint",
		"UseObjectLambdaEndpoint", "DisableAccessPoints", "DisableMultiRegionAccessPoints",
		"UseArnRegion", "UseS3ExpressControlEndpoint", "DisableS3ExpressSessionAuth",
	}
	leftOut := []string{"Key", "Prefix", "CopySource"}
	ty := reflect.TypeFor[awss3.EndpointParameters]()
	var fields []string
	for i := range ty.NumField() {
		fields = append(fields, ty.Field(i).Name)
	}
	slices.Sort(fields)
	want := slices.Concat(inKey, leftOut)
	slices.Sort(want)
	if !slices.Equal(fields, want) {
		t.Fatalf("awss3.EndpointParameters has fields %q; the cache knows %q", fields, want)
	}
}

type countingResolver struct {
	next  awss3.EndpointResolverV2
	calls atomic.Int32
}

func (c *countingResolver) ResolveEndpoint(ctx context.Context, p awss3.EndpointParameters) (smithyendpoints.Endpoint, error) {
	c.calls.Add(1)
	return c.next.ResolveEndpoint(ctx, p)
}

// The cache answers what the SDK's rules answer, for a store of our own
// (path-style) and for AWS (virtual-hosted, FIPS), whatever the object key;
// it asks the rules once per distinct set of parameters, and a request
// that changes its copy changes nothing the next one gets.
func TestEndpointCacheAnswersAsTheRules(t *testing.T) {
	ctx := context.Background()
	rules := awss3.NewDefaultEndpointResolverV2()
	next := &countingResolver{next: rules}
	c := newEndpointCache(next)
	params := func(bucket, endpoint string, pathStyle, fips bool, key string) awss3.EndpointParameters {
		p := awss3.EndpointParameters{
			Bucket: aws.String(bucket), Region: aws.String("us-east-1"),
			UseFIPS: aws.Bool(fips), UseDualStack: aws.Bool(false), ForcePathStyle: aws.Bool(pathStyle),
			Accelerate: aws.Bool(false), Key: aws.String(key),
		}
		if endpoint != "" {
			p.Endpoint = aws.String(endpoint)
		}
		return p
	}
	cases := []awss3.EndpointParameters{
		params("wasmkeep", "http://127.0.0.1:7070", true, false, "cluster/state/a"),
		params("wasmkeep", "http://127.0.0.1:7070", true, false, "cluster/alarms/b"),
		params("other", "http://127.0.0.1:7070", true, false, "cluster/state/a"),
		params("wasmkeep", "", false, false, "k1"),
		params("wasmkeep", "", false, false, "k2"),
		params("wasmkeep", "", false, true, "k1"),
	}
	for round := range 3 {
		for i, p := range cases {
			got, err := c.ResolveEndpoint(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := rules.ResolveEndpoint(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if got.URI.String() != want.URI.String() || !reflect.DeepEqual(got.Headers, want.Headers) {
				t.Fatalf("round %d, case %d: cached %s %v, the rules say %s %v", round, i, got.URI.String(), got.Headers, want.URI.String(), want.Headers)
			}
			if opts, ok := smithyauth.GetAuthOptions(&got.Properties); ok && opts[0].SignerProperties.Has("changed") {
				t.Fatalf("round %d, case %d: a change to an earlier answer's auth options shows", round, i)
			}
			if round == 0 && i == 0 {
				if got.Headers == nil {
					got.Headers = map[string][]string{}
				}
				got.Headers.Set("X-Changed", "1")
				got.URI.Path = "/changed"
				// The SDK merges properties into the auth options in place.
				opts, ok := smithyauth.GetAuthOptions(&got.Properties)
				if !ok || len(opts) == 0 {
					t.Fatal("the endpoint has no auth options")
				}
				opts[0].SignerProperties.Set("changed", true)
			}
		}
	}
	if n := next.calls.Load(); n != 4 {
		t.Fatalf("the rules ran %d times, want 4 (one per distinct set of parameters, the object key aside)", n)
	}
}
