package clusterproc

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
)

// ClientOf is a client of the HTTP API of the node at nodeURL: package
// client, the API's Go client, as keepctl uses it. Its calls are bounded
// by their context, and by a 2-minute timeout as a backstop. The URLs of
// this package's nodes are always good ones; ClientOf panics on a URL
// client.New refuses (a defect of the caller).
func ClientOf(nodeURL string, opts ...client.Option) *client.Client {
	opts = append([]client.Option{client.WithHTTPClient(&http.Client{Timeout: 2 * time.Minute})}, opts...)
	c, err := client.New(nodeURL, opts...)
	if err != nil {
		panic(err)
	}
	return c
}

// Client is ClientOf(n.URL).
func (n *Node) Client(opts ...client.Option) *client.Client { return ClientOf(n.URL, opts...) }

// ActorURL is the API path of an actor on the node at nodeURL, each part
// path-escaped (a '/' in a name becomes %2F), for a test that sends a
// request of its own rather than the client's.
func ActorURL(nodeURL string, id abi.ActorID) string {
	return strings.TrimRight(nodeURL, "/") + "/v1/actors/" + url.PathEscape(id.Tenant) + "/" +
		url.PathEscape(id.Class) + "/" + url.PathEscape(id.Name)
}
