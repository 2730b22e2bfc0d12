package testguest_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/internal/testguest"
)

// Each SDK's README shows a test of a timer-using actor; the block after a
// "<!-- tested: FILE -->" line must be, line for line (indentation aside),
// part of that file, which the SDK's tests run, so the README cannot drift
// from a test that passes.
func TestSDKReadmesQuoteTestsThatRun(t *testing.T) {
	root := testguest.Root(t)
	marker := regexp.MustCompile("(?s)<!-- tested: (\\S+) -->\\n```\\w*\\n(.*?)\\n```")
	for _, readme := range []string{"guest-sdk/README.md", "guest-sdk-rust/README.md", "guest-sdk-as/README.md"} {
		doc, err := os.ReadFile(filepath.Join(root, readme))
		if err != nil {
			t.Fatal(err)
		}
		quotes := marker.FindAllStringSubmatch(string(doc), -1)
		if len(quotes) == 0 {
			t.Errorf("%s quotes no tested file", readme)
		}
		for _, q := range quotes {
			src, err := os.ReadFile(filepath.Join(root, q[1]))
			if err != nil {
				t.Errorf("%s quotes %s: %v", readme, q[1], err)
				continue
			}
			if !strings.Contains(trimLines(string(src)), trimLines(q[2])) {
				t.Errorf("%s quotes a block that is not in %s:\n%s", readme, q[1], q[2])
			}
		}
	}
}

func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}
