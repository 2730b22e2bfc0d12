package main

import (
	"fmt"

	"github.com/wasmkeep/alarms/engine"
)

// preinitFlag is -preinit: whether classes start their instances from a
// pre-initialised image (engine.WithPreinit): "auto", "on" or "off" for
// every class, "CLASS=MODE" for one, comma-separated or repeated
// ("auto,counter=on"). The default is auto.
type preinitFlag struct{ perClass[engine.Preinit] }

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
	return f.format(preinitName)
}

func (f *preinitFlag) Set(v string) error {
	return f.set(v, "auto, on or off, as MODE or CLASS=MODE", func(s string) (engine.Preinit, bool) {
		p, ok := preinitModes[s]
		return p, ok
	})
}

// options returns the engine's options, refusing a class that is not
// served (a misspelt name would leave the class it meant at the default).
func (f *preinitFlag) options(served classFlags) ([]engine.Option, error) {
	return f.perClass.options("preinit", served, preinitName, engine.WithPreinit)
}
