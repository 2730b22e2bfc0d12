//go:build !linux

package hostmod_test

import "time"

// threadCPU is not read outside Linux: the benchmark reports no cpu-ratio.
func threadCPU() time.Duration { return 0 }
