package node_test

import (
	"flag"

	"github.com/wasmkeep/alarms/engine"
)

var (
	preinitFlag = flag.String("preinit", "auto", "pre-initialised images for every class of the nodes of the tests and benchmarks: auto, on or off")
	durableFlag = flag.Bool("durable", false, "durable commits through the node journal in the data directory (keepnode's default) for the nodes of the tests and benchmarks")
)

// durableOptions are the engine options -durable asks for, for a node
// whose data directory is dir.
func durableOptions(dir string) []engine.Option {
	if *durableFlag {
		return []engine.Option{engine.WithJournal(dir)}
	}
	return nil
}

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
