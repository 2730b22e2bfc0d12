package abi_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/wasmkeep/alarms/abi"
)

// The C header spells the ABI in C: its errnos, limits, import modules and
// names must be the ones of this package.
func TestCHeaderMatchesTheABI(t *testing.T) {
	h, err := os.ReadFile("wasmkeep.h")
	if err != nil {
		t.Fatal(err)
	}
	defines := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define (WASMKEEP_\w+) (.+?)\s*(?:/\*.*)?$`).FindAllStringSubmatch(string(h), -1) {
		defines[m[1]] = m[2]
	}
	for name, want := range map[string]abi.Errno{
		"ESUCCESS": abi.ESUCCESS, "E2BIG": abi.E2BIG, "EFAULT": abi.EFAULT, "EINVAL": abi.EINVAL,
		"EIO": abi.EIO, "ENOENT": abi.ENOENT, "EPERM": abi.EPERM,
	} {
		if got := defines["WASMKEEP_"+name]; got != strconv.Itoa(int(want)) {
			t.Errorf("WASMKEEP_%s is %q, want %d", name, got, want)
		}
	}
	for name, want := range map[string]string{
		"WASMKEEP_MAX_ALARM_MS":     "INT64_C(" + strconv.FormatInt(abi.MaxAlarmMillis, 10) + ")",
		"WASMKEEP_MAX_KEY_LEN":      strconv.Itoa(abi.MaxKeyLen),
		"WASMKEEP_MAX_VALUE_LEN":    "(1 << 20)",
		"WASMKEEP_MAX_ACTOR_ID_LEN": strconv.Itoa(abi.MaxActorIDLen),
	} {
		if got := defines[name]; got != want {
			t.Errorf("%s is %q, want %q", name, got, want)
		}
	}
	if abi.MaxValueLen != 1<<20 {
		t.Errorf("abi.MaxValueLen is %d; update the header", abi.MaxValueLen)
	}
	imports := map[string]string{}
	for _, m := range regexp.MustCompile(`WASMKEEP_IMPORT\("([^"]+)", "([^"]+)"\)`).FindAllStringSubmatch(string(h), -1) {
		imports[m[2]] = m[1]
	}
	want := map[string]string{
		abi.FuncSetAlarm: abi.AlarmModule, abi.FuncGetAlarm: abi.AlarmModule, abi.FuncClearAlarm: abi.AlarmModule,
		abi.FuncRequestRead: abi.ActorModule, abi.FuncResponseWrite: abi.ActorModule,
		abi.FuncKVGet: abi.ActorModule, abi.FuncKVPut: abi.ActorModule, abi.FuncKVDelete: abi.ActorModule,
		abi.FuncActorID: abi.ActorModule,
	}
	if len(imports) != len(want) {
		t.Errorf("the header declares %d imports, want %d: %v", len(imports), len(want), imports)
	}
	for name, module := range want {
		if imports[name] != module {
			t.Errorf("import %s: header says module %q, want %q", name, imports[name], module)
		}
	}
}
