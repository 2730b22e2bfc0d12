package s3

import (
	"context"
	"sync"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyauth "github.com/aws/smithy-go/auth"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
)

// endpointCache resolves each distinct set of endpoint parameters with the
// SDK's rules once and answers again from memory. The rules (a decision
// diagram of some hundred conditions, run for every request with a stack
// deep enough to grow a fresh goroutine's) are a pure function of the
// parameters, and a client of one bucket asks with the same few sets
// (the bucket, its region and endpoint, the options) over and over.
//
// The key holds every parameter the rules read; Key, Prefix and CopySource,
// which vary with each request, are left out because the rules of this
// SDK version read none of them (TestEndpointParametersTheCacheKnows holds
// the list to the SDK's struct, so a new parameter fails a test rather than
// being ignored).
type endpointCache struct {
	next awss3.EndpointResolverV2
	mu   sync.RWMutex
	m    map[endpointKey]smithyendpoints.Endpoint
}

// maxCachedEndpoints bounds the cache; past it, results are not kept.
const maxCachedEndpoints = 64

type endpointKey struct {
	bucket, region, endpoint string
	flags                    string // each *bool parameter: '-' (nil), '0' or '1'
}

func optBool(b *bool) byte {
	switch {
	case b == nil:
		return '-'
	case *b:
		return '1'
	}
	return '0'
}

func optString(s *string) string {
	if s == nil {
		return "\x00" // unset, distinct from ""
	}
	return *s
}

func newEndpointCache(next awss3.EndpointResolverV2) *endpointCache {
	return &endpointCache{next: next, m: map[endpointKey]smithyendpoints.Endpoint{}}
}

func (c *endpointCache) key(p awss3.EndpointParameters) endpointKey {
	flags := []byte{
		optBool(p.UseFIPS), optBool(p.UseDualStack), optBool(p.ForcePathStyle),
		optBool(p.Accelerate), optBool(p.UseGlobalEndpoint), optBool(p.UseObjectLambdaEndpoint),
		optBool(p.DisableAccessPoints), optBool(p.DisableMultiRegionAccessPoints),
		optBool(p.UseArnRegion), optBool(p.UseS3ExpressControlEndpoint),
		optBool(p.DisableS3ExpressSessionAuth),
	}
	return endpointKey{
		bucket: optString(p.Bucket), region: optString(p.Region), endpoint: optString(p.Endpoint),
		flags: string(flags),
	}
}

// ResolveEndpoint returns the endpoint for p, a copy of the one resolved
// before for the same parameters if there is one.
func (c *endpointCache) ResolveEndpoint(ctx context.Context, p awss3.EndpointParameters) (smithyendpoints.Endpoint, error) {
	k := c.key(p)
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return copyEndpoint(e), nil
	}
	e, err := c.next.ResolveEndpoint(ctx, p)
	if err != nil {
		return e, err
	}
	c.mu.Lock()
	if len(c.m) < maxCachedEndpoints {
		c.m[k] = copyEndpoint(e)
	}
	c.mu.Unlock()
	return e, nil
}

// copyEndpoint copies e so that neither the cache nor a request sees the
// other's changes: the URL is a value, the headers and properties are
// maps, the auth options among the properties pointers.
func copyEndpoint(e smithyendpoints.Endpoint) smithyendpoints.Endpoint {
	out := smithyendpoints.Endpoint{URI: e.URI}
	if e.URI.User != nil {
		u := *e.URI.User
		out.URI.User = &u
	}
	if e.Headers != nil {
		out.Headers = e.Headers.Clone()
	}
	out.Properties.SetAll(&e.Properties)
	// The auth options are pointers the SDK changes in place (it merges
	// the modelled options' properties into them): each caller gets its
	// own.
	if opts, ok := smithyauth.GetAuthOptions(&e.Properties); ok {
		own := make([]*smithyauth.Option, len(opts))
		for i, o := range opts {
			c := &smithyauth.Option{SchemeID: o.SchemeID}
			c.IdentityProperties.SetAll(&o.IdentityProperties)
			c.SignerProperties.SetAll(&o.SignerProperties)
			own[i] = c
		}
		smithyauth.SetAuthOptions(&out.Properties, own)
	}
	return out
}
