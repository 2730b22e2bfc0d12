package engine

import (
	"flag"
	"fmt"

	"github.com/wasmkeep/alarms/abi"
)

// Preinitialised reports whether the class's instances start from a
// pre-initialised image (which exports no _initialize) of a module that
// exports one.
func (c *Class) Preinitialised() bool {
	_, ok := c.compiled.ExportedFunctions()[abi.ExportInitialize]
	return !ok
}

// MappedImage reports whether the class's instances map its image's
// memory copy-on-write (Linux, an image larger than 1 MiB).
func (c *Class) MappedImage() bool { return c.image != nil }

// preinitFlag sets the images of every engine of the tests whose options
// do not (-preinit on runs them all with images on).
type preinitFlag struct{}

func (preinitFlag) String() string { return "auto" }

func (preinitFlag) Set(s string) error {
	switch s {
	case "auto":
		defaultPreinit = PreinitAuto
	case "on":
		defaultPreinit = PreinitOn
	case "off":
		defaultPreinit = PreinitOff
	default:
		return fmt.Errorf("want auto, on or off")
	}
	return nil
}

func init() {
	flag.Var(preinitFlag{}, "preinit", "pre-initialised images for the classes of every engine whose options set none: auto, on or off")
}
