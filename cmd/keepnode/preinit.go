package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wasmkeep/alarms/engine"
)

// preinitFlag is -preinit: whether classes start their instances from a
// pre-initialised image (engine.WithPreinit): "auto", "on" or "off" for
// every class, "CLASS=MODE" for one, comma-separated or repeated
// ("auto,counter=on"). The default is auto.
type preinitFlag struct {
	all     engine.Preinit
	classes map[string]engine.Preinit
}

var preinitModes = map[string]engine.Preinit{"auto": engine.PreinitAuto, "on": engine.PreinitOn, "off": engine.PreinitOff}

func preinitName(p engine.Preinit) string {
	for name, q := range preinitModes {
		if q == p {
			return name
		}
	}
	return fmt.Sprint(int(p))
}

func (f *preinitFlag) String() string {
	if f == nil {
		return "auto"
	}
	parts := []string{preinitName(f.all)}
	for _, c := range slices.Sorted(maps.Keys(f.classes)) {
		parts = append(parts, c+"="+preinitName(f.classes[c]))
	}
	return strings.Join(parts, ",")
}

func (f *preinitFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		class, mode, perClass := strings.Cut(part, "=")
		if !perClass {
			mode, class = class, ""
		}
		p, ok := preinitModes[mode]
		if !ok {
			return fmt.Errorf("%q: want auto, on or off, as MODE or CLASS=MODE", part)
		}
		if !perClass {
			f.all = p
			continue
		}
		if class == "" {
			return fmt.Errorf("%q: no class name before '='", part)
		}
		if f.classes == nil {
			f.classes = map[string]engine.Preinit{}
		}
		f.classes[class] = p
	}
	return nil
}

// options returns the engine's options, refusing a class that is not
// served (a misspelt name would leave the class it meant at the default).
func (f *preinitFlag) options(served classFlags) ([]engine.Option, error) {
	opts := []engine.Option{engine.WithPreinit("", f.all)}
	for _, class := range slices.Sorted(maps.Keys(f.classes)) {
		if _, ok := served[class]; !ok {
			return nil, fmt.Errorf("-preinit %s=%s: no -class %s is served here", class, preinitName(f.classes[class]), class)
		}
		opts = append(opts, engine.WithPreinit(class, f.classes[class]))
	}
	return opts, nil
}
