package node_test

import (
	"flag"

	"github.com/wasmkeep/alarms/hostmod"
)

var preinitFlag = flag.String("preinit", "auto", "pre-initialised images for every class of the nodes of the tests and benchmarks: auto, on or off")

// preinitOptions are the engine options -preinit asks for.
func preinitOptions() []hostmod.Option {
	switch *preinitFlag {
	case "on":
		return []hostmod.Option{hostmod.WithPreinit("", hostmod.PreinitOn)}
	case "off":
		return []hostmod.Option{hostmod.WithPreinit("", hostmod.PreinitOff)}
	}
	return nil
}
