package alarmindex

import (
	"fmt"

	"github.com/wasmkeep/alarms/abi"
)

// BackfillFacts is what an operator's tool knows of one actor from the
// bucket alone, without holding it: its latest replicated state and the
// index entries of the actor at the committed alarm's time.
type BackfillFacts struct {
	Actor abi.ActorID
	// Alarm is the committed alarm of the latest state (nil: none).
	Alarm *int64
	// Recorded is the entry the state names (alarm_indexed), nil for none.
	Recorded *Key
	// Generation is the hold generation of the latest state's upload.
	Generation uint64
	// AtAlarm are the actor's entries in the index at *Alarm, tagged and
	// legacy.
	AtAlarm []Key
}

// Backfill says which entry to PUT so that a committed alarm is listed
// (spec 0009, "What can still go wrong": alarms set before the index, or an
// entry lost by hand): nil when the alarm needs none. It never deletes. A
// named entry at the alarm's time that is missing is PUT again under its
// own key, which restores what the state names; otherwise (nothing named,
// or named at another time) a fresh key tagged with the state's generation,
// which the next owner may remove (R3) once it names an entry of its own.
// Either way the worst a PUT can leave is an extra entry, which costs one
// wake-up and is removed.
func (r Rules) Backfill(f BackfillFacts) (*Key, error) {
	if f.Alarm == nil {
		return nil, nil
	}
	if err := f.Actor.Validate(); err != nil {
		return nil, err
	}
	at := *f.Alarm
	named := f.Recorded != nil && f.Recorded.DueMs == at
	for _, k := range f.AtAlarm {
		if k.Actor != f.Actor || k.DueMs != at {
			continue
		}
		if !named || k == *f.Recorded {
			return nil, nil // listed
		}
	}
	if named {
		k := *f.Recorded
		return &k, nil
	}
	if r.Nonces == nil {
		return nil, fmt.Errorf("alarm index: actor %s: backfill needs a nonce source", f.Actor)
	}
	k := Key{Actor: f.Actor, DueMs: at, Tag: Tag{Generation: f.Generation, Nonce: r.Nonces.Next()}}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return &k, nil
}
