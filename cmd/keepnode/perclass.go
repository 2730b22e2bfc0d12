package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wasmkeep/alarms/engine"
)

// perClass is a flag's value that sets one thing for every class ("V") and
// for single classes ("CLASS=V"), comma-separated or repeated; a later
// value adds to an earlier one. -max-attempts and -preinit are two.
type perClass[T any] struct {
	all     T
	classes map[string]T
}

// format prints the value as Set reads it: the setting for every class,
// then each class's in name order.
func (f *perClass[T]) format(name func(T) string) string {
	parts := []string{name(f.all)}
	for _, c := range slices.Sorted(maps.Keys(f.classes)) {
		parts = append(parts, c+"="+name(f.classes[c]))
	}
	return strings.Join(parts, ",")
}

// set reads v with parse, whose refusals say they want want.
func (f *perClass[T]) set(v, want string, parse func(string) (T, bool)) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		class, s, perClass := strings.Cut(part, "=")
		if !perClass {
			s, class = class, ""
		}
		x, ok := parse(s)
		if !ok {
			return fmt.Errorf("%q: want %s", part, want)
		}
		if !perClass {
			f.all = x
			continue
		}
		if class == "" {
			return fmt.Errorf("%q: no class name before '='", part)
		}
		if f.classes == nil {
			f.classes = map[string]T{}
		}
		f.classes[class] = x
	}
	return nil
}

// options returns the engine's options, one (class "") for every class and
// then one for each class named, refusing a class that is not served: a
// misspelt name would leave the class it meant at the setting for all.
func (f *perClass[T]) options(flag string, served classFlags, name func(T) string, opt func(class string, v T) engine.Option) ([]engine.Option, error) {
	opts := []engine.Option{opt("", f.all)}
	for _, class := range slices.Sorted(maps.Keys(f.classes)) {
		if _, ok := served[class]; !ok {
			return nil, fmt.Errorf("-%s %s=%s: no -class %s is served here", flag, class, name(f.classes[class]), class)
		}
		opts = append(opts, opt(class, f.classes[class]))
	}
	return opts, nil
}
