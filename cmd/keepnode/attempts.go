package main

import (
	"strconv"

	"github.com/wasmkeep/alarms/engine"
)

// attemptsFlag is -max-attempts: "N" for every class, "CLASS=N" for one,
// comma-separated or repeated ("6,payments=20,batch=0"). 0 is no limit, the
// design's default.
type attemptsFlag struct{ perClass[int] }

func (f *attemptsFlag) String() string {
	if f == nil {
		return "0"
	}
	return f.format(strconv.Itoa)
}

func (f *attemptsFlag) Set(v string) error {
	return f.set(v, "a count of attempts, 0 (no limit) or more, as N or CLASS=N", func(s string) (int, bool) {
		n, err := strconv.Atoi(s)
		return n, err == nil && n >= 0
	})
}

// options returns the engine's options for the limits, refusing a class
// that is not served (a misspelt name would otherwise leave the class it
// meant without its limit).
func (f *attemptsFlag) options(served classFlags) ([]engine.Option, error) {
	return f.perClass.options("max-attempts", served, strconv.Itoa, func(class string, n int) engine.Option {
		if class == "" {
			return engine.WithMaxAttempts(n)
		}
		return engine.WithClassMaxAttempts(class, n)
	})
}
