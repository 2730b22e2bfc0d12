package alarmindex

import (
	"errors"
	"github.com/wasmkeep/alarms/internal/variant"
	"reflect"
	"strings"
	"testing"
)

// execScript answers an executor's steps and records them: PUT, record,
// upload and the rest succeed; the hold is valid unless lapsed says which
// check (by count, from 1) finds it lapsed; list returns the given keys.
type execScript struct {
	lapsedAt int
	listed   []Key
	failKind StepKind
	checks   int
	log      []string
}

func (sc *execScript) run(x *Exec) []string {
	for {
		s := x.Next()
		switch s.Kind {
		case StepDone:
			return sc.log
		case StepPut, StepDelete:
			sc.log = append(sc.log, s.Kind.String()+" "+short(&s.Key))
		case StepRecord, StepFence:
			sc.log = append(sc.log, s.Kind.String()+" "+s.Value)
		default:
			sc.log = append(sc.log, s.Kind.String())
		}
		switch s.Kind {
		case StepCheckHold:
			sc.checks++
			x.ReportHold(sc.checks != sc.lapsedAt)
		case StepList:
			var keys []string
			for _, k := range sc.listed {
				keys = append(keys, k.String())
			}
			var err error
			if sc.failKind == StepList {
				err = errors.New("connection reset")
			}
			x.ReportList(keys, err)
		default:
			var err error
			if s.Kind == sc.failKind {
				err = errors.New("connection reset")
			}
			x.Report(err)
		}
	}
}

func TestExecIndexOrderPutRecordUploadCheckThenDelete(t *testing.T) {
	r := rulesWith(variant.Set{})
	p, err := r.AfterEvent(eventFacts(ms(t2), tagged(t1, 2, "a"), 3))
	if err != nil {
		t.Fatal(err)
	}
	x := r.ExecIndex(actorA, p)
	got := (&execScript{}).run(x)
	want := []string{"put t2@g3", "record " + FormatRecorded(p.Recorded), "upload", "check-hold", "delete t1@g2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
	if x.Err() != nil {
		t.Fatal(x.Err())
	}
}

// The rule no plan states: an upload that returned after the hold lapsed
// does not count, and the entry it replaced stays (a newer holder's state
// may name it).
func TestExecIndexAnUploadThatReturnsAfterTheHoldLapsedDeletesNothing(t *testing.T) {
	r := rulesWith(variant.Set{})
	p, err := r.AfterEvent(eventFacts(ms(t2), tagged(t1, 2, "a"), 3))
	if err != nil {
		t.Fatal(err)
	}
	x := r.ExecIndex(actorA, p)
	got := (&execScript{lapsedAt: 1}).run(x)
	if want := []string{"put t2@g3", "record " + FormatRecorded(p.Recorded), "upload", "check-hold"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
	if !errors.Is(x.Err(), ErrGiveUp) || !strings.Contains(x.Err().Error(), "lapsed") {
		t.Fatalf("Err() = %v, want a give-up naming the lapsed hold", x.Err())
	}
	// The mutation trusts it and deletes.
	m := rulesWith(variant.Set{TrustLateUploads: true})
	got = (&execScript{lapsedAt: 1}).run(m.ExecIndex(actorA, p))
	if got[len(got)-1] != "delete t1@g2" {
		t.Fatalf("TrustLateUploads: steps %q, want the replaced entry deleted", got)
	}
}

func TestExecIndexStopsAtTheFirstFailure(t *testing.T) {
	r := rulesWith(variant.Set{})
	p, err := r.AfterEvent(eventFacts(ms(t2), tagged(t1, 2, "a"), 3))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []StepKind{StepPut, StepRecord, StepUpload} {
		x := r.ExecIndex(actorA, p)
		got := (&execScript{failKind: k}).run(x)
		if got[len(got)-1] != k.String()+strings.TrimPrefix(got[len(got)-1], k.String()) || strings.Contains(strings.Join(got, ","), "delete") {
			t.Errorf("%s fails: steps %q; want it last and no delete", k, got)
		}
		var g *GiveUpError
		if !errors.As(x.Err(), &g) || g.Actor != actorA || !strings.Contains(g.Error(), "connection reset") {
			t.Errorf("%s fails: Err() = %v, want a GiveUpError naming the actor and the cause", k, x.Err())
		}
	}
	// A failed DELETE is harmless.
	x := r.ExecIndex(actorA, p)
	(&execScript{failKind: StepDelete}).run(x)
	if x.Err() != nil {
		t.Errorf("a failed DELETE gave up: %v", x.Err())
	}
}

func TestExecIndexFirstUploadBeforeEntryMutationUploadsFirst(t *testing.T) {
	r := rulesWith(variant.Set{FirstUploadBeforeEntry: true})
	p, err := r.FirstUpload(eventFacts(ms(t2), nil, 1))
	if err != nil {
		t.Fatal(err)
	}
	got := (&execScript{}).run(r.ExecIndex(actorA, p))
	if got[0] != "upload" || !strings.HasPrefix(got[2], "put") {
		t.Fatalf("steps %q, want the upload (and its check) before the PUT", got)
	}
}

func TestExecDeliveryFencesThenChecksTheHoldThenListsAndDeletesStale(t *testing.T) {
	r := rulesWith(variant.Set{})
	named := tagged(t2, 3, "e")
	f := deliveryFacts(tagged(t1, 0, ""), ms(t2), named, 3)
	f.Uploaded = false
	p, err := r.Deliver(f)
	if err != nil {
		t.Fatal(err)
	}
	stale, newer := tagged(t1, 2, "5"), tagged(t1, 4, "f")
	x := r.ExecDelivery(p)
	got := (&execScript{listed: []Key{*stale, *newer}}).run(x)
	want := []string{"fence 3", "upload", "check-hold", "check-hold", "list", "delete t1@g2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
	if d := x.Deleted(); len(d) != 1 || d[0] != *stale {
		t.Errorf("Deleted() = %v, want the stale entry", d)
	}
	// The hold lapsing after the fence upload, or before the LIST, removes
	// nothing.
	for lapsed := 1; lapsed <= 2; lapsed++ {
		x := r.ExecDelivery(p)
		got := (&execScript{listed: []Key{*stale}, lapsedAt: lapsed}).run(x)
		if strings.Contains(strings.Join(got, ","), "list") || x.Err() == nil {
			t.Errorf("hold lapsed at check %d: steps %q, err %v; want no LIST and a give-up", lapsed, got, x.Err())
		}
	}
	// A failed LIST gives up and deletes nothing.
	x = r.ExecDelivery(p)
	got = (&execScript{listed: []Key{*stale}, failKind: StepList}).run(x)
	if got[len(got)-1] != "list" || !errors.Is(x.Err(), ErrGiveUp) {
		t.Errorf("failed LIST: steps %q, err %v", got, x.Err())
	}
}

func TestExecDeliveryKeepRetriesAndReleases(t *testing.T) {
	r := rulesWith(variant.Set{})
	f := deliveryFacts(tagged(t1, 0, ""), ms(t2), nil, 3)
	f.BucketHadActor, f.Uploaded = false, false
	p, err := r.Deliver(f)
	if err != nil {
		t.Fatal(err)
	}
	got := (&execScript{}).run(r.ExecDelivery(p))
	if want := []string{"retry", "release"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
}

func TestExecPanicsOnAReportWithoutAStep(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Report with no step in progress did not panic")
		}
	}()
	rulesWith(variant.Set{}).ExecIndex(actorA, IndexPlan{}).Report(nil)
}
