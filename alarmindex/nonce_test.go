package alarmindex

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestNoncesNeverRepeatAcrossGoroutines(t *testing.T) {
	src, err := NewNonceSource(rand.NewChaCha8([32]byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 2000
	results := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				results[w] = append(results[w], src.Next())
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, workers*each)
	for _, rs := range results {
		for _, n := range rs {
			if seen[n] {
				t.Fatalf("nonce %q handed out twice", n)
			}
			if !isLowerHex(n) || len(n) != 32 {
				t.Fatalf("nonce %q is not 32 lowercase hex digits", n)
			}
			seen[n] = true
		}
	}
}

func TestNonceSourceRestartDrawsNewPrefix(t *testing.T) {
	// Two boots of one node read different random bytes: no nonce of the
	// first run reappears in the second, though both counters restart.
	boot := rand.NewChaCha8([32]byte{2})
	first, err := NewNonceSource(boot)
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewNonceSource(boot)
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.Next(), second.Next()
	if a == b {
		t.Fatalf("restarted source repeated %q", a)
	}
	if a[16:] != b[16:] {
		t.Fatalf("counters differ (%q, %q): the prefix, not the counter, must tell runs apart", a, b)
	}
}

func TestNonceSourceIsDeterministicForASeed(t *testing.T) {
	x, _ := NewNonceSource(rand.NewChaCha8([32]byte{3}))
	y, _ := NewNonceSource(rand.NewChaCha8([32]byte{3}))
	for range 3 {
		if p, q := x.Next(), y.Next(); p != q {
			t.Fatalf("same seed, different nonces %q and %q", p, q)
		}
	}
}

func TestNonceSourceFailsOnShortRead(t *testing.T) {
	_, err := NewNonceSource(bytes.NewReader([]byte{1, 2, 3}))
	if err == nil || !strings.Contains(err.Error(), "nonce boot prefix") {
		t.Fatalf("NewNonceSource(short) = %v, want an error", err)
	}
	boom := errors.New("boom")
	_, err = NewNonceSource(failingReader{boom})
	if !errors.Is(err, boom) {
		t.Fatalf("NewNonceSource(failing) = %v, want it to wrap the cause", err)
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestNonceCounterIsFixedWidth(t *testing.T) {
	src, _ := NewNonceSource(bytes.NewReader(make([]byte, NoncePrefixBytes)))
	if got := src.Next(); got != strings.Repeat("0", 31)+"1" {
		t.Fatalf("first nonce %q", got)
	}
	for range 15 {
		src.Next()
	}
	if got := src.Next(); got != strings.Repeat("0", 30)+"11" {
		t.Fatalf("17th nonce %q", got)
	}
}
