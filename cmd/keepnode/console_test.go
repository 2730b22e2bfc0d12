package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// keepnode serves the console only with -ui: without it /ui is a 404;
// with it the nodes page names the node.
func TestConsoleOnlyWithTheUIFlag(t *testing.T) {
	ctx := testContext(t)
	srv := s3test.Start(t)
	cfg := nodeConfig(t, procS3(srv))
	for _, c := range []struct {
		name   string
		args   []string
		status int
	}{{"plain", nil, http.StatusNotFound}, {"ui", []string{"-ui"}, http.StatusOK}} {
		nd, err := clusterproc.StartNode(ctx, cfg, c.name, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		defer nd.Kill()
		resp, err := http.Get(nd.URL + "/ui/nodes")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("keepnode %v: GET /ui/nodes %d, want %d", c.args, resp.StatusCode, c.status)
		}
		if c.status == http.StatusOK && !strings.Contains(string(body), nd.NodeID) {
			t.Errorf("keepnode -ui: the nodes page does not name node %s: %s", nd.NodeID, string(body))
		}
	}
}
