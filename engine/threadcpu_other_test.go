//go:build !linux

package engine_test

import "time"

// threadCPU is not read outside Linux: the benchmarks report no CPU time.
func threadCPU() time.Duration { return 0 }

// processCPU is not read outside Linux either.
func processCPU() time.Duration { return 0 }
