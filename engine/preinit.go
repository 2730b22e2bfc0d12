package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/alarms/internal/preinit"
)

// Preinit says whether the instances of a class start from a
// pre-initialised image of it: a copy of the module rewritten to start
// where an instance stood once _initialize (and a start function) had
// returned, so that a new instance runs no initialisation
// (abi/ABI.md#pre-initialised-images).
type Preinit int

const (
	// PreinitAuto, the default: an image when one can be built faithfully
	// and the initialisation read nothing that could differ between
	// instances (no random numbers, no clock, no output), so that an
	// instance of the image cannot be told from one that ran it; and for a
	// Go guest, whose runtime reads random numbers and the clock as it
	// starts: its random number generators are found in the image and
	// each instance gets seeds of its own (math/rand, math/rand/v2, map
	// iteration), and its clock continues from the image's. What a Go
	// guest's package initialisation itself drew at random (a value kept
	// in a variable, the hash seeds of maps it filled) is the image's in
	// every instance (docs/design.md#images-and-seeds).
	PreinitAuto Preinit = iota
	// PreinitOn: an image whenever one can be built faithfully, even if
	// the initialisation read random numbers or the clock: every instance
	// of the image then shares the values the image run read, but for a
	// Go runtime's generators, which each instance gets afresh as with
	// PreinitAuto.
	PreinitOn
	// PreinitOff: every instance runs the initialisation.
	PreinitOff
)

// WithPreinit sets whether the instances of class start from a
// pre-initialised image (default PreinitAuto); class "" sets it for every
// class not named. An image that cannot be built faithfully (a host call
// or a trap during the initialisation, an imported memory: ABI.md) is
// refused, and the class runs its initialisation in each instance. An
// engine with WithModuleConfig or WithRuntime makes no images: the image
// run could not see each actor's environment, files and host modules.
func WithPreinit(class string, p Preinit) Option {
	return func(o *config) {
		if o.preinit == nil {
			o.preinit = map[string]Preinit{}
		}
		o.preinit[class] = p
	}
}

// defaultPreinit is the setting of a class WithPreinit does not name,
// directly or as "" (the tests of this package can change it: -preinit).
var defaultPreinit = PreinitAuto

// imageKey names an image by the SHA-256 of the module it was made from,
// so that one made from a version of a class is never used for another,
// and by the memory limit it ran under.
type imageKey struct {
	sum   [32]byte
	pages uint32
}

// imageResult is an image as the engines of the process use it: the
// module they compile for the class, and on Linux, for an image whose
// memory is larger than a kept one, the image's memory in a sealed memfd
// that each instance maps copy-on-write, the module then being the image
// without its data (preinit.Image.Bare). The image's own copies of its
// module and memory are dropped once these are made.
type imageResult struct {
	im     *preinit.Image
	module []byte
	mem    *imageMemory
	err    error
}

// imageUse makes what the engines use of a new image.
func imageUse(im *preinit.Image, logger hclog.Logger) imageResult {
	res := imageResult{module: im.Wasm}
	if len(im.Memory) > keptMemoryLargest {
		if mem, err := newImageMemory(im.Memory); err != nil {
			logger.Debug("the image's memory is copied into each instance", "reason", err)
		} else {
			res.module, res.mem = im.Bare, mem
		}
	}
	kept := *im
	kept.Wasm, kept.Bare, kept.Memory = nil, nil, nil
	res.im = &kept
	return res
}

// images are the images made in this process (and the refusals), so that
// engines compiling one class make its image once. An image is never kept
// across processes: the monotonic clock it read is this process's.
var images = struct {
	sync.Mutex
	m map[imageKey]imageResult
}{m: map[imageKey]imageResult{}}

// maxImages bounds the images kept; past it they are forgotten and made
// again as needed.
const maxImages = 64

// image returns the class's image compiled in the engine's runtime, and
// the image's memory when each instance must be given it (see
// guestMemory.image), or nil when its instances run their initialisation.
func (e *Engine) image(ctx context.Context, class string, wasm []byte) (wazero.CompiledModule, *imageMemory, []preinit.Generator) {
	mode, ok := e.cfg.preinit[class]
	if !ok {
		if mode, ok = e.cfg.preinit[""]; !ok {
			mode = defaultPreinit
		}
	}
	if mode == PreinitOff || !e.owned || e.cfg.moduleConfig != nil {
		return nil, nil, nil
	}
	key := imageKey{sha256.Sum256(wasm), e.cfg.memoryPages}
	images.Lock()
	res, ok := images.m[key]
	images.Unlock()
	if !ok {
		cache := e.cfg.cache
		if cache == nil {
			cache = sharedCache
		}
		im, err := preinit.Build(ctx, wasm, preinit.Config{
			MemoryLimitPages: e.cfg.memoryPages, Cache: cache,
			Walltime: e.cfg.clock.Now, Timeout: e.cfg.eventDeadlineOf(class),
		})
		if ctx.Err() != nil {
			return nil, nil, nil // not the module's doing: try again next time
		}
		if res.err = err; err == nil {
			res = imageUse(im, e.cfg.logger)
		}
		images.Lock()
		if len(images.m) >= maxImages {
			clear(images.m)
		}
		images.m[key] = res
		images.Unlock()
	}
	im, err := res.im, res.err
	if err == nil && mode == PreinitAuto && im.Reads.Any() && !reseededRuntime(im) {
		// Said at INFO, once per class an engine compiles (at a node's
		// start): the cost is each cold start's, and the choice is the
		// host's (docs/design.md#images-and-seeds).
		e.cfg.logger.Info("class runs its initialisation in each new instance: no pre-initialised image, since instances of one would share what it read; images on (WithPreinit PreinitOn, keepnode -preinit CLASS=on) spare each cold start that run, at the cost of those shared values",
			"class", class, "reads", im.Reads.String(), "init_ms_per_cold_start", float64(im.Init.Microseconds())/1000)
		return nil, nil, nil
	}
	if err == nil && !im.For(wasm) {
		err = errors.New("the image was made from another module") // never: the key is the module's hash
	}
	var cm wazero.CompiledModule
	if err == nil {
		cm, err = e.r.CompileModule(ctx, res.module)
	}
	if err != nil {
		if !errors.Is(err, preinit.ErrNothingToRun) {
			e.cfg.logger.Debug("class runs its initialisation in each instance", "class", class, "reason", err)
		}
		return nil, nil, nil
	}
	e.cfg.logger.Debug("class starts from a pre-initialised image", "class", class, "pages", im.Pages, "data_bytes", im.DataBytes, "reads", im.Reads.String(), "mapped", res.mem != nil, "generators_reseeded", len(im.Generators))
	return cm, res.mem, im.Generators
}

// reseededRuntime reports whether an image whose initialisation read from
// outside is still one PreinitAuto gives a class: a Go runtime's start,
// which read random numbers once, into generators each instance gets
// afresh (preinit.Image.Generators), and the clock, for the origin of its
// monotonic time, which an instance's clock continues from
// (docs/design.md#images-and-seeds). Output, or random numbers read into
// anything else, still is not.
func reseededRuntime(im *preinit.Image) bool {
	return im.Reseedable() && !im.Reads.Output
}
