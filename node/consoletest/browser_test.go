package consoletest

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// -screenshots writes each view's screenshot to docs/img, for
// docs/operations.md#console:
//
//	go test ./node/consoletest -run TestConsoleInABrowser -screenshots
var screenshots = flag.Bool("screenshots", false, "write the console's screenshots to docs/img")

// requireChromium is the variable that makes a missing browser fail the
// test instead of skipping it (CI sets it).
const requireChromium = "WASMKEEP_REQUIRE_CHROMIUM"

// chromium finds the browser: Debian's chromium, or another build of it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(requireChromium) == "1" {
		t.Fatalf("no chromium on PATH, and %s=1: install it (Debian: apt-get install chromium)", requireChromium)
	}
	t.Skipf("no chromium on PATH (Debian: apt-get install chromium; %s=1 makes this a failure)", requireChromium)
	return ""
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// The console in a real browser, against two nodes of a cluster: sign in
// with the operator's token, see both nodes and this node's lease and
// version, the last sweep, the tenants, a tenant's overdue alarm and one
// due soon, and its dead letter; click its redrive button and see it go,
// and its alarm run.
func TestConsoleInABrowser(t *testing.T) {
	path := chromium(t)
	ctx := context.Background()
	b := bucket.NewMem()
	a := serve(t, b, "node-a", security, true)
	serve(t, b, "node-b", security, true)
	if err := a.Leases().RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	letter := abi.ActorID{Tenant: "t", Class: "scripted", Name: "invoice-42"}
	giveUp(t, a.URL, letter)
	setIn(t, a.URL, abi.ActorID{Tenant: "t", Class: "scripted", Name: "reminder-7"}, 5*time.Minute)
	a.Plugin().Sweep(ctx)
	overdue(t, b, abi.ActorID{Tenant: "t", Class: "reports", Name: "nightly"})
	// The guest is fixed: the redrive's run succeeds.
	request(t, a.URL, letter, "mode ok")

	// The browser lives as long as its allocator's context: at most a few
	// minutes, whatever happens.
	tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1200, 800))
	actx, cancel := chromedp.NewExecAllocator(tctx, opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	// The first run starts the browser, for as long as bctx lasts; each
	// step after it has a time of its own, so a page that never shows
	// what a step waits for fails that step (in a minute: a step took over
	// 30 s once, on two cores loaded with the other packages' tests).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	step := func() context.Context {
		ctx, cancel := context.WithTimeout(bctx, time.Minute)
		t.Cleanup(cancel)
		return ctx
	}

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(step(), steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(step(), chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("the screenshot of %s: %v", name, err)
		}
		if !bytes.HasPrefix(png, pngMagic) {
			t.Errorf("the screenshot of %s is not a PNG (%d bytes)", name, len(png))
		}
		if *screenshots {
			if err := os.WriteFile(filepath.Join(testguest.Root(t), "docs", "img", "console-"+name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	text := func(what, sel string) string {
		t.Helper()
		s, err := chromedp.Run(step(), chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: the text of %s: %v", what, sel, err)
		}
		return s
	}
	// view loads path, waits for sel and returns its text.
	view := func(what, path, sel string) string {
		t.Helper()
		do(what+" ("+path+")", chromedp.Navigate(a.URL+path), chromedp.WaitVisible(chromedp.CSS(sel)))
		return text(what, sel)
	}
	expect := func(what, text string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: %q does not show %q", what, text, w)
			}
		}
	}

	// Signing in: the form, then the nodes.
	view("the sign-in page", "/ui/nodes", "#token")
	shot("login")
	do("sign in: type the token, click Sign in, wait for the nodes", chromedp.SendKeys(chromedp.ID("token"), operatorToken), chromedp.Click(chromedp.ID("sign-in")),
		chromedp.WaitVisible(chromedp.ID("nodes")))
	if loc, err := chromedp.Run(step(), chromedp.Location()); err != nil || strings.Contains(loc, operatorToken) || !strings.HasSuffix(loc, "/ui/nodes") {
		t.Errorf("after signing in the browser is at %q (%v); want /ui/nodes, without the token", loc, err)
	}

	nodes := view("the nodes", "/ui/nodes", "#nodes")
	expect("the nodes", nodes, "node-a", "(this node)", "valid", "node-b", "live: seen renewed", "scripted")
	shot("nodes")

	expect("the sweeps", view("the sweeps", "/ui/sweeps", "main"), "every tenant's index read", "Sweeps of a tenant's index", "1h0m0s")
	shot("sweeps")

	expect("the tenants", view("the tenants", "/ui/tenants", "#tenants"), "t")
	shot("tenants")

	alarms := view("the alarms of t", "/ui/tenants/t/alarms", "main")
	expect("the alarms of t", alarms, "Overdue (1)", "reports", "nightly", "overdue by 1h", "Due within 15m0s (1)", "reminder-7", "\tin ")
	shot("alarms")

	letters := view("the dead letters of t", "/ui/tenants/t/dead-letters", "#dead-letters")
	expect("the dead letters of t", letters, "invoice-42", "failing on alarm, as asked")
	shot("dead-letters")

	// Redrive: the button posts the form; the page comes back without the
	// dead letter, and the actor's alarm runs.
	do("redrive: click its button, then wait for the note that it was redriven and a list without it", chromedp.Click(chromedp.CSS("button.redrive")), chromedp.WaitVisible(chromedp.ID("redriven")),
		chromedp.WaitVisible(chromedp.ID("no-letters")))
	expect("after the redrive", text("after the redrive", "#redriven"), "scripted/invoice-42")
	shot("redriven")
	if got := deadLetters(t, a.URL, "t"); len(got) != 0 {
		t.Errorf("dead letters of t after the redrive: %v, want none", got)
	}
	waitFor(t, "the redriven alarm to run", func() bool { return request(t, a.URL, letter, "getkv log") != "none" })
}
