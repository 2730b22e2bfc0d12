package node_test

import (
	"flag"

	"github.com/wasmkeep/alarms/engine"
)

var preinitFlag = flag.String("preinit", "auto", "pre-initialised images for every class of the nodes of the tests and benchmarks: auto, on or off")

// preinitOptions are the engine options -preinit asks for.
func preinitOptions() []engine.Option {
	switch *preinitFlag {
	case "on":
		return []engine.Option{engine.WithPreinit("", engine.PreinitOn)}
	case "off":
		return []engine.Option{engine.WithPreinit("", engine.PreinitOff)}
	}
	return nil
}
