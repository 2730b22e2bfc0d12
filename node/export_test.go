package node

import "github.com/wasmkeep/alarms/abi"

// SetTestHook makes f run at the start of each event and inside open (see
// testHook) until the returned function restores the previous hook.
func SetTestHook(f func(op string, id abi.ActorID)) (restore func()) {
	old := testHook.Swap(&f)
	return func() { testHook.Store(old) }
}
