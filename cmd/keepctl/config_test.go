package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keepnode.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// keepctl -config reads keepnode's own file for the bucket and the prefix
// (and a node's API): on the node's machine, an operator types no -bucket.
// A flag, then a KEEPCTL_ variable, wins over the file.
func TestKeepctlTakesTheBucketAndPrefixFromKeepnodesFile(t *testing.T) {
	ctx := context.Background()
	mem := bucket.NewMem()
	lease := `{"format":1,"node_id":"n1","addr":"10.0.0.1:7600","ttl_ms":600000,"renewed_ms":` + itoa(time.Now().UnixMilli()) + `,"seq":1,"instance":"i","classes":null}`
	if _, err := mem.Put(ctx, "other/nodes/n1", []byte(lease), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	var opened []string
	open := func(_ context.Context, name string) (bucket.Bucket, error) {
		opened = append(opened, name)
		return mem, nil
	}
	file := writeFile(t, "data = \"/var/lib/keepnode\"\nbucket = \"from-file\"\nprefix = \"other/\"\nlisten = \"0.0.0.0:7600\"\nlease-ttl = \"10s\"\n")
	keepctl := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		status := run(ctx, args, &out, &errOut, open)
		return status, out.String() + errOut.String()
	}

	if status, out := keepctl("-config", file, "nodes"); status != 0 || !strings.Contains(out, "n1") || opened[len(opened)-1] != "from-file" {
		t.Fatalf("keepctl -config FILE nodes: exit %d, bucket %v, output:\n%s\nwant the file's bucket and prefix (its node n1 listed)", status, opened, out)
	}
	t.Setenv(envConfig, file)
	if status, out := keepctl("nodes"); status != 0 || !strings.Contains(out, "n1") {
		t.Fatalf("keepctl nodes with $%s: exit %d:\n%s", envConfig, status, out)
	}
	if status, _ := keepctl("-bucket", "from-flag", "nodes"); status != 0 || opened[len(opened)-1] != "from-flag" {
		t.Errorf("-bucket with a file: opened %v, want the flag's bucket", opened)
	}
	t.Setenv(envBucket, "from-env")
	if status, _ := keepctl("nodes"); status != 0 || opened[len(opened)-1] != "from-env" {
		t.Errorf("$%s with a file: opened %v, want the variable's bucket", envBucket, opened)
	}
	// The prefix of the file is the one read: with the default prefix the
	// bucket holds nothing, and keepctl says so.
	if status, out := keepctl("-prefix", "cluster/", "nodes"); status != 2 || !strings.Contains(out, "cluster/") {
		t.Errorf("-prefix cluster/ over the file's other/: exit %d:\n%s\nwant exit 2 naming the empty prefix", status, out)
	}

	for _, bad := range []struct{ text, want string }{
		{"bucket = 7\n", "bucket = 7: want a string"},
		{"bucket = \"b\"\nlisten = \"7600\"\n", `listen = "7600"`},
		{"bucket = \n", "keepnode.toml"},
	} {
		status, out := keepctl("-config", writeFile(t, bad.text), "nodes")
		if status != 2 || !strings.Contains(out, bad.want) {
			t.Errorf("-config with %q: exit %d, %q; want exit 2 saying %q", bad.text, status, out, bad.want)
		}
	}
	if status, out := keepctl("-config", filepath.Join(t.TempDir(), "none.toml"), "nodes"); status != 2 || !strings.Contains(out, "none.toml") {
		t.Errorf("-config of a missing file: exit %d, %q", status, out)
	}
}

// The node's API in keepnode's file: advertise as it is; else listen, a
// wildcard host read as 127.0.0.1 (keepctl beside the node); https when
// the node serves TLS, with its CA.
func TestKeepnodesFileNamesTheNodesAPI(t *testing.T) {
	for _, c := range []struct{ text, node, ca string }{
		{"listen = \"0.0.0.0:7600\"\n", "http://127.0.0.1:7600", ""},
		{"listen = \"[::]:7600\"\n", "http://127.0.0.1:7600", ""},
		{"listen = \"10.1.2.3:7600\"\n", "http://10.1.2.3:7600", ""},
		{"listen = \"0.0.0.0:7600\"\nadvertise = \"node-0.keepnode:7600\"\n", "http://node-0.keepnode:7600", ""},
		{"listen = \":7600\"\ntls-cert = \"/c.pem\"\ntls-key = \"/k.pem\"\ntls-ca = \"/ca.pem\"\n", "https://127.0.0.1:7600", "/ca.pem"},
		{"bucket = \"b\"\n", "", ""},
	} {
		st, err := readNodeFile(writeFile(t, c.text))
		if err != nil || st.node != c.node || st.ca != c.ca {
			t.Errorf("%q: node %q, ca %q (%v); want %q, %q", c.text, st.node, st.ca, err, c.node, c.ca)
		}
	}
}
