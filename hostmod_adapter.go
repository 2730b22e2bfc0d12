package alarms

import (
	"context"

	"github.com/wasmkeep/alarms/hostmod"
)

// ReadHostmod reads what Actor.Read returns from the database of an actor
// run by package hostmod: the committed alarm, alarm_indexed and whether
// on-init is recorded. A host built on hostmod calls it from its Read.
func ReadHostmod(ctx context.Context, a *hostmod.Actor) (ActorState, error) {
	s, err := a.State(ctx)
	if err != nil {
		return ActorState{}, err
	}
	st := ActorState{Indexed: s.Indexed, InitRecorded: s.InitRecorded}
	if s.HasAlarm {
		st.Alarm = &s.Alarm
	}
	return st, nil
}

// WriteHostmodMeta commits one meta row, in a transaction of its own, in
// the database of an actor run by package hostmod: what Actor.WriteMeta
// does for a host built on hostmod (hostmod.Actor.SetMeta, which keeps the
// actor's committed state known, so the next Read costs no query).
func WriteHostmodMeta(ctx context.Context, a *hostmod.Actor, key, value string) error {
	return a.SetMeta(ctx, key, value)
}
