package main

import (
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
)

// main serves POST /<tenant>/<name> as a request event on that actor of
// the one class it runs; -bucket uses S3 (AWS_ENDPOINT_URL and the usual
// AWS variables), else an in-memory bucket.
func main() {
	wasm := flag.String("wasm", "", "the class's guest (.wasm)")
	bucketName := flag.String("bucket", "", "S3 bucket (default: in memory)")
	dir := flag.String("data", "extism-host-data", "directory of the actors' databases")
	listen := flag.String("listen", "127.0.0.1:7701", "HTTP address")
	flag.Parse()
	ctx := context.Background()
	code, err := os.ReadFile(*wasm)
	if err != nil {
		log.Fatal(err)
	}
	var b bucket.Bucket = bucket.NewMem()
	if *bucketName != "" {
		if b, err = s3.New(ctx, *bucketName); err != nil {
			log.Fatal(err)
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	h, err := New(ctx, b, *dir, "c", code, []string{"t"}, 12*time.Second, 10*time.Second, 0, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)
	http.HandleFunc("POST /{tenant}/{name}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		resp, err := h.Request(r.Context(), abi.ActorID{Tenant: r.PathValue("tenant"), Class: "c", Name: r.PathValue("name")}, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write(resp)
	})
	log.Fatal(http.ListenAndServe(*listen, nil))
}
