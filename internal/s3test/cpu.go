package s3test

import (
	"os"
	"strconv"
	"strings"
)

// ProcessCPU is the user and system CPU time, in seconds, process pid has
// spent (its /proc stat, in ticks of 10 ms; 0 where that cannot be read):
// benchmarks read the S3 server's (Server.Pid) and the nodes'.
func ProcessCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: state is the
	// first (field 3), utime and stime are fields 14 and 15, in ticks of
	// 1/100 s (USER_HZ on Linux).
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}
