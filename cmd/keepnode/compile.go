package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/engine"
)

// compileClasses is -compile-only: it compiles each class with the engine
// options the node would have (the compilation cache among them), which
// writes the compiled code into the cache, and returns. The engine opens
// no journal and no database, so it runs beside a node on the same data
// directory; wazero writes each cache entry to a file of its own and
// renames it into place, so neither process reads half an entry.
func compileClasses(ctx context.Context, logger hclog.Logger, opts []engine.Option, wasm map[string][]byte) error {
	eng, err := engine.NewEngine(ctx, opts...)
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	for _, name := range slices.Sorted(maps.Keys(wasm)) {
		began := time.Now()
		if _, err := eng.Compile(ctx, name, wasm[name]); err != nil {
			return fmt.Errorf("class %s: %w", name, err)
		}
		logger.Info("class compiled into the cache", "class", name, "took", time.Since(began).Round(time.Millisecond))
	}
	return nil
}
