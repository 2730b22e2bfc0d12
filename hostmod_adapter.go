package alarms

import (
	"context"
	"errors"

	"github.com/wasmkeep/alarms/hostmod"
)

// ReadHostmod reads what Actor.Read returns from the database of an actor
// run by package hostmod: the committed alarm, alarm_indexed and whether
// on-init is recorded. A host built on hostmod calls it from its Read.
func ReadHostmod(_ context.Context, a *hostmod.Actor) (ActorState, error) {
	var st ActorState
	err := a.Lock(func(s *hostmod.Store) error {
		at, ok, err1 := s.Alarm()
		if ok {
			st.Alarm = &at
		}
		var err2, err3 error
		st.Indexed, _, err2 = s.Meta(hostmod.MetaAlarmIndexed)
		_, st.InitRecorded, err3 = s.Meta(hostmod.MetaInitDone)
		return errors.Join(err1, err2, err3)
	})
	return st, err
}

// WriteHostmodMeta commits one meta row, in a transaction of its own, in
// the database of an actor run by package hostmod: what Actor.WriteMeta
// does for a host built on hostmod.
func WriteHostmodMeta(_ context.Context, a *hostmod.Actor, key, value string) error {
	return a.Lock(func(s *hostmod.Store) error {
		if err := s.Begin(); err != nil {
			return err
		}
		if err := s.SetMeta(key, value); err != nil {
			s.Rollback()
			return err
		}
		return s.Commit()
	})
}
