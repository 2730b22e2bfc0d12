package alarmindex

import (
	"testing"

	"github.com/wasmkeep/alarms/abi"
)

type fixedNonces string

func (n fixedNonces) Next() string { return string(n) }

func TestBackfill(t *testing.T) {
	a := abi.ActorID{Tenant: "t", Class: "c", Name: "n"}
	at := int64(5000)
	named := Key{Actor: a, DueMs: at, Tag: Tag{Generation: 3, Nonce: "aa"}}
	other := Key{Actor: a, DueMs: at, Tag: Tag{Generation: 2, Nonce: "bb"}}
	elsewhere := Key{Actor: a, DueMs: 4000, Tag: Tag{Generation: 3, Nonce: "cc"}}
	fresh := Key{Actor: a, DueMs: at, Tag: Tag{Generation: 7, Nonce: "ff"}}
	cases := []struct {
		name string
		f    BackfillFacts
		want *Key
	}{
		{"no alarm", BackfillFacts{Actor: a, Recorded: &named}, nil},
		{"the named entry exists", BackfillFacts{Actor: a, Alarm: &at, Recorded: &named, Generation: 7, AtAlarm: []Key{other, named}}, nil},
		{"the named entry is missing: it is put again", BackfillFacts{Actor: a, Alarm: &at, Recorded: &named, Generation: 7, AtAlarm: []Key{other}}, &named},
		{"nothing named, an entry at its time", BackfillFacts{Actor: a, Alarm: &at, Generation: 7, AtAlarm: []Key{other}}, nil},
		{"nothing named, nothing listed: a fresh entry", BackfillFacts{Actor: a, Alarm: &at, Generation: 7}, &fresh},
		{"named at another time, nothing at the alarm's", BackfillFacts{Actor: a, Alarm: &at, Recorded: &elsewhere, Generation: 7}, &fresh},
		{"another actor's entry does not count", BackfillFacts{Actor: a, Alarm: &at, Generation: 7,
			AtAlarm: []Key{{Actor: abi.ActorID{Tenant: "t", Class: "c", Name: "m"}, DueMs: at, Tag: Tag{Generation: 1, Nonce: "01"}}}}, &fresh},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Rules{Nonces: fixedNonces("ff")}.Backfill(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("Backfill = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := (Rules{}).Backfill(BackfillFacts{Actor: a, Alarm: &at, Generation: 1}); err == nil {
		t.Fatal("a fresh entry without a nonce source: no error")
	}
}
