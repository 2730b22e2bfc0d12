package node

import (
	"fmt"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
)

// SetTestHook makes f run at the start of each event and inside open (see
// testHook) until the returned function restores the previous hook.
func SetTestHook(f func(op string, id abi.ActorID)) (restore func()) {
	old := testHook.Swap(&f)
	return func() { testHook.Store(old) }
}

// BeginOnOpenActor leaves a write transaction open on the database of the
// open actor id, so that the actor's next transaction fails (as any failed
// write would) until the returned function rolls it back. Call it from the
// goroutine that has the actor in use (a bucket fault during its upload):
// it reads the node's entry without its lock.
func (n *Node) BeginOnOpenActor(id abi.ActorID) (rollback func(), err error) {
	n.mu.Lock()
	e := n.entries[id]
	n.mu.Unlock()
	if e == nil || e.a == nil {
		return nil, fmt.Errorf("actor %s is not open", id)
	}
	a := e.a
	if err := a.Lock(func(s *engine.Store) error { return s.Begin() }); err != nil {
		return nil, err
	}
	return func() { _ = a.Lock(func(s *engine.Store) error { return s.Rollback() }) }, nil
}

// ModuleVersion is moduleVersion: what wasmkeep_build_info labels a build
// with.
var ModuleVersion = moduleVersion
