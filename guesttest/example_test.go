package guesttest_test

import (
	"fmt"
	"os"
	"time"

	"github.com/wasmkeep/alarms/guesttest"
)

// A guest whose on-request sets its alarm at 1000 ms and whose on-alarm
// fails: the host retries it 1 s, then 2 s later, with the count committed.
func Example() {
	t := &exampleT{}
	defer t.cleanup()
	wasm, err := os.ReadFile("../testdata/wasm/fail_on_alarm.wasm")
	if err != nil {
		fmt.Println(err)
		return
	}
	g := guesttest.New(t, wasm)
	if _, err := g.Request(nil); err != nil {
		fmt.Println(err)
		return
	}
	start := g.Now()
	for _, f := range g.Advance(5 * time.Second) {
		fmt.Printf("+%v: retry count %d, failed %v\n", f.At.Sub(start), f.RetryCount, f.Err != nil)
	}
	at, _ := g.Alarm()
	fmt.Printf("next attempt at +%v, retry count %d\n", at.Sub(start), g.RetryCount())
	// Output:
	// +0s: retry count 0, failed true
	// +1s: retry count 1, failed true
	// +3s: retry count 2, failed true
	// next attempt at +7s, retry count 3
}

// exampleT is the little of a *testing.T a Guest needs, for an example
// outside a test.
type exampleT struct{ dirs, cleanups []func() }

func (t *exampleT) Helper() {}
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (t *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "guesttest-")
	if err != nil {
		panic(err)
	}
	t.dirs = append(t.dirs, func() { os.RemoveAll(d) })
	return d
}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	for _, f := range t.dirs {
		f()
	}
}
