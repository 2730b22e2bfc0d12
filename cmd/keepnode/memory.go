package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmkeep/alarms/engine"
)

// byteSize is a flag holding a number of bytes, written as a count of
// bytes or with a unit: KiB, MiB or GiB.
type byteSize uint64

var units = []struct {
	suffix string
	shift  uint
}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}}

func (b *byteSize) String() string {
	for _, u := range units {
		if v := uint64(*b); v != 0 && v%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", v>>u.shift, u.suffix)
		}
	}
	return strconv.FormatUint(uint64(*b), 10)
}

func (b *byteSize) Set(s string) error {
	num, shift := strings.TrimSpace(s), uint(0)
	for _, u := range units {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, shift = strings.TrimSpace(n), u.shift
			break
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v > (1<<63)>>shift {
		return fmt.Errorf("%q is not a size: a number of bytes, or of KiB, MiB or GiB (such as 512MiB)", s)
	}
	*b = byteSize(v << shift)
	return nil
}

// memoryFlags are the bounds on guests' memory.
type memoryFlags struct {
	total, instance byteSize
	// durable is -durable-commits (engine.WithJournal in the data
	// directory), which rides with the engine's other storage and memory
	// options.
	durable bool
	// syncedDeliveries is -synced-deliveries
	// (engine.WithSyncedDeliveries).
	syncedDeliveries bool
}

func addMemoryFlags(fs *flag.FlagSet) *memoryFlags {
	m := &memoryFlags{total: engine.DefaultMaxTotalMemory, instance: engine.DefaultMemoryLimit}
	fs.Var(&m.total, "max-memory", "budget of linear memory for all guest instances together (KiB, MiB, GiB): past it idle instances close, and a guest that still needs more sees memory.grow fail, its event failing with an error naming it")
	fs.Var(&m.instance, "instance-memory", "most linear memory one guest instance may have (KiB, MiB, GiB; whole 64 KiB pages, at most 4GiB)")
	return m
}

// options returns the engine's options for the flags, the actors'
// databases being under dataDir.
func (m *memoryFlags) options(dataDir string) ([]engine.Option, error) {
	if m.instance < 64<<10 || m.instance > 4<<30 {
		return nil, fmt.Errorf("-instance-memory %s: must be from 64KiB to 4GiB", &m.instance)
	}
	if m.total < m.instance {
		return nil, fmt.Errorf("-max-memory %s is less than -instance-memory %s: one instance could never use what it may", &m.total, &m.instance)
	}
	opts := []engine.Option{engine.WithMaxTotalMemory(uint64(m.total)), engine.WithMemoryLimit(uint64(m.instance))}
	if m.durable {
		opts = append(opts, engine.WithJournal(dataDir), engine.WithSyncedDeliveries(m.syncedDeliveries))
	}
	return opts, nil
}
