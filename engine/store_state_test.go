package engine

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/hostmod"
)

// State reads in one statement what Alarm, Failures and Meta read one by
// one, whatever the database holds: rows missing, a failure count with no
// alarm, an empty meta value, other meta rows (a NULL key among them, which
// the table's primary key lets in), and host tables missing (a database made
// before they existed), which State creates, as stmt does for every
// statement.
func TestStoreStateReadsWhatTheRowsHold(t *testing.T) {
	const at = 1_800_000_000_000
	cases := []struct {
		name  string
		setup func(*Store) error
		want  hostmod.CommittedState
	}{
		{"new", func(*Store) error { return nil }, hostmod.CommittedState{}},
		{"alarm", func(s *Store) error { return s.SetAlarm(at) }, hostmod.CommittedState{Alarm: alarmAt(at)}},
		{"failures without an alarm", func(s *Store) error { return s.SetFailures(3) }, hostmod.CommittedState{Failures: 3}},
		{"everything", func(s *Store) error {
			return firstErr(s.SetAlarm(at), s.SetFailures(2), s.SetMeta(hostmod.MetaAlarmIndexed, "1800000000000/2-ab"), s.SetMeta(hostmod.MetaInitDone, "1"))
		}, hostmod.CommittedState{Alarm: alarmAt(at), Failures: 2, Indexed: "1800000000000/2-ab", InitDone: true}},
		{"an empty indexed row and other meta", func(s *Store) error {
			return firstErr(s.SetMeta(hostmod.MetaAlarmIndexed, ""), s.SetMeta(hostmod.MetaOwnerFence, "f"),
				s.conn.Exec(`INSERT INTO a._wasmkeep_meta (key, value) VALUES (NULL, '7'), (7, '8')`))
		}, hostmod.CommittedState{}},
		{"no meta table", func(s *Store) error {
			return firstErr(s.SetAlarm(at), s.conn.Exec(`DROP TABLE a._wasmkeep_meta`))
		}, hostmod.CommittedState{Alarm: alarmAt(at)}},
		{"no alarm table", func(s *Store) error {
			return firstErr(s.SetFailures(1), s.SetMeta(hostmod.MetaInitDone, "1"), s.conn.Exec(`DROP TABLE a._wasmkeep_alarm`))
		}, hostmod.CommittedState{Failures: 1, InitDone: true}},
		{"no host tables", func(s *Store) error {
			return s.conn.Exec(`DROP TABLE a._wasmkeep_alarm; DROP TABLE a._wasmkeep_meta`)
		}, hostmod.CommittedState{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.db")
			s, err := OpenStore(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.setup(s); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = OpenStore(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := s.State()
			if err != nil {
				t.Fatalf("State: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("State = %+v, want %+v", got, tc.want)
			}
			// The same as the reads one by one (which now find every table).
			var one hostmod.CommittedState
			var errs [4]error
			at, set, err := s.Alarm()
			if errs[0] = err; set {
				one.Alarm = &at
			}
			one.Failures, errs[1] = s.Failures()
			one.Indexed, _, errs[2] = s.Meta(hostmod.MetaAlarmIndexed)
			_, one.InitDone, errs[3] = s.Meta(hostmod.MetaInitDone)
			if err := firstErr(errs[:]...); err != nil || !reflect.DeepEqual(one, got) {
				t.Fatalf("one by one: %+v, %v; State read %+v", one, err, got)
			}
		})
	}
}

// A malformed failure count is an error that says which row and what it
// holds, as Failures says it.
func TestStoreStateRefusesAMalformedFailureCount(t *testing.T) {
	for _, v := range []string{"x", "-1", ""} {
		s, err := OpenStore(filepath.Join(t.TempDir(), "a.db"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetMeta(hostmod.MetaAlarmFailures, v); err != nil {
			t.Fatal(err)
		}
		_, err = s.State()
		if err == nil || !strings.Contains(err.Error(), "meta alarm_failures: malformed value") {
			t.Fatalf("failures %q: State error %v, want the malformed value named", v, err)
		}
		if _, ferr := s.Failures(); ferr == nil || ferr.Error() != err.Error() {
			t.Fatalf("failures %q: State said %v, Failures %v", v, err, ferr)
		}
		s.Close()
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func alarmAt(v int64) *int64 { return &v }
