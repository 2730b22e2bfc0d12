package main

import (
	"context"
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// -preinit takes auto, on or off for every class and CLASS=MODE for one,
// and refuses what it cannot use: another word, a missing class name, a
// class this node does not serve.
func TestPreinitFlag(t *testing.T) {
	var f preinitFlag
	if f.String() != "auto" {
		t.Fatalf("the default prints as %q", f.String())
	}
	if err := f.Set("on,counter=off, batch=auto"); err != nil {
		t.Fatal(err)
	}
	if f.all != engine.PreinitOn || f.classes["counter"] != engine.PreinitOff || f.classes["batch"] != engine.PreinitAuto || len(f.classes) != 2 {
		t.Fatalf("parsed %+v", f)
	}
	if err := f.Set("mail=on"); err != nil || f.all != engine.PreinitOn || f.classes["mail"] != engine.PreinitOn {
		t.Fatalf("a second -preinit adds to the first: %+v, %v", f, err)
	}
	if got := f.String(); got != "on,batch=auto,counter=off,mail=on" {
		t.Errorf("String() = %q", got)
	}
	served := classFlags{"counter": "c.wasm", "batch": "b.wasm", "mail": "m.wasm"}
	if opts, err := f.options(served); err != nil || len(opts) != 4 {
		t.Fatalf("options: %d, %v", len(opts), err)
	}
	if _, err := f.options(classFlags{"counter": "c.wasm"}); err == nil || !strings.Contains(err.Error(), "no -class batch") {
		t.Fatalf("a setting for a class not served: %v", err)
	}
	for _, bad := range []string{"yes", "", "=on", "a=1", "a=", "auto,b=maybe"} {
		var g preinitFlag
		if err := g.Set(bad); err == nil {
			t.Errorf("-preinit %q accepted", bad)
		}
	}
}

// The flag reaches the engine: a class whose initialisation reads the
// clock (init_clock) starts from an image with -preinit on, mapped into
// its instances on Linux, and from none by default or where its class is
// turned off.
func TestPreinitFlagReachesTheEngine(t *testing.T) {
	wasm := testguest.Fixture(t, "init_clock")
	served := classFlags{"clock": "init_clock.wasm"}
	for _, c := range []struct {
		args  []string
		image bool
	}{
		{nil, false},
		{[]string{"-preinit", "auto"}, false},
		{[]string{"-preinit", "on"}, true},
		{[]string{"-preinit", "clock=on"}, true},
		{[]string{"-preinit", "on,clock=off"}, false},
		{[]string{"-preinit", "off"}, false},
	} {
		fs, o := newFlags(flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		opts, err := o.preinit.options(served)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		eng, err := engine.NewEngine(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Compile(ctx, "clock", wasm); err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if c.image && runtime.GOOS == "linux" {
			want = 17 * 65536
		}
		if got := eng.Memory().Images; got != want {
			t.Errorf("%q: the engine maps %d bytes of images, want %d", c.args, got, want)
		}
		eng.Close(ctx)
	}
}
