package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmkeep/alarms/engine"
)

// attemptsFlag is -max-attempts: "N" for every class, "CLASS=N" for one,
// comma-separated or repeated ("6,payments=20,batch=0"). 0 is no limit, the
// design's default.
type attemptsFlag struct {
	all     int
	classes map[string]int
	set     bool
}

func (f *attemptsFlag) String() string {
	if f == nil || !f.set {
		return "0"
	}
	parts := []string{strconv.Itoa(f.all)}
	for _, c := range slices.Sorted(maps.Keys(f.classes)) {
		parts = append(parts, fmt.Sprintf("%s=%d", c, f.classes[c]))
	}
	return strings.Join(parts, ",")
}

func (f *attemptsFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		class, num, perClass := strings.Cut(part, "=")
		if !perClass {
			num, class = class, ""
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want a count of attempts, 0 (no limit) or more, as N or CLASS=N", part)
		}
		if !perClass {
			f.all = n
		} else {
			if class == "" {
				return fmt.Errorf("%q: no class name before '='", part)
			}
			if f.classes == nil {
				f.classes = map[string]int{}
			}
			f.classes[class] = n
		}
	}
	f.set = true
	return nil
}

// options returns the engine's options for the limits, refusing a class
// that is not served (a misspelt name would otherwise leave the class it
// meant without its limit).
func (f *attemptsFlag) options(served classFlags) ([]engine.Option, error) {
	opts := []engine.Option{engine.WithMaxAttempts(f.all)}
	for _, class := range slices.Sorted(maps.Keys(f.classes)) {
		n := f.classes[class]
		if _, ok := served[class]; !ok {
			return nil, fmt.Errorf("-max-attempts %s=%d: no -class %s is served here", class, n, class)
		}
		opts = append(opts, engine.WithClassMaxAttempts(class, n))
	}
	return opts, nil
}
