package alarms

import (
	"context"
	"time"

	"github.com/wasmkeep/alarms/hostmod"
)

// ReadTable reads what Actor.Read returns from the alarm table of a host
// that keeps the actor's database itself (hostmod.Table): the committed
// alarm and alarm_indexed. InitRecorded is true: the host calls it only
// for an actor whose database exists.
func ReadTable(t *hostmod.Table) (ActorState, error) {
	s, err := t.State()
	if err != nil {
		return ActorState{}, err
	}
	st := ActorState{Indexed: s.Indexed, InitRecorded: true}
	if s.HasAlarm {
		st.Alarm = &s.Alarm
	}
	return st, nil
}

// OneNode is the Host of a host that runs as one node, named Name, on the
// system clock: it alone is alive.
type OneNode struct{ Name string }

func (n OneNode) Now() time.Time                              { return time.Now() }
func (n OneNode) After(d time.Duration) <-chan time.Time      { return time.After(d) }
func (n OneNode) Self() string                                { return n.Name }
func (n OneNode) LiveNodes(context.Context) ([]string, error) { return []string{n.Name}, nil }
