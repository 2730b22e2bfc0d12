package inspect_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// The doctor reads states concurrently and reports exactly what it reports
// reading them one at a time: the same actors, entries, missing alarms and
// extras, in the same order, at the same request count; its progress
// counts up to every actor.
func TestVerifyInParallelGivesTheSameReport(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		base := time.Now().Add(time.Hour).UnixMilli()
		due := map[abi.ActorID]int64{}
		for i := range 30 {
			due[actor(fmt.Sprintf("t%d", i%3), fmt.Sprint(i))] = base + int64(i)
		}
		cluster(t, b, due)
		c := inspect.New(b, prefix)
		for _, victim := range []abi.ActorID{actor("t1", "4"), actor("t2", "20")} {
			info, err := c.Actor(ctx, victim)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Delete(ctx, info.Named); err != nil {
				t.Fatal(err)
			}
		}
		var reports []inspect.Report
		for _, n := range []int{1, 8} {
			var mu sync.Mutex
			var seen []int
			rep, err := c.Verify(ctx, inspect.VerifyOptions{Concurrency: n, Progress: func(done, total int) {
				mu.Lock()
				seen = append(seen, done)
				mu.Unlock()
				if total != 30 {
					t.Errorf("progress total %d, want 30", total)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) == 0 || seen[len(seen)-1] != 30 {
				t.Errorf("concurrency %d: progress %v, want it to end at 30", n, seen)
			}
			reports = append(reports, rep)
		}
		one, many := reports[0], reports[1]
		if one.OK() || len(one.Missing) != 2 || one.Actors != 30 {
			t.Fatalf("one at a time: %+v, want 30 actors and the 2 missing entries", one)
		}
		if !reflect.DeepEqual(one, many) {
			t.Errorf("in parallel the report differs:\n%+v\nwant\n%+v", many, one)
		}
	})
}

// failingGets fails the GET of one actor's snapshot.
type failingGets struct {
	bucket.Bucket
	name string
}

var errInjected = errors.New("injected GET failure")

func (f failingGets) Get(ctx context.Context, key string) ([]byte, string, error) {
	if strings.Contains(key, "/state/") && strings.Contains(key, f.name) {
		return nil, "", errInjected
	}
	return f.Bucket.Get(ctx, key)
}

// A state the doctor cannot read fails the check with that error, however
// many reads run at once, rather than reporting without it.
func TestVerifyInParallelFailsOnAStateItCannotRead(t *testing.T) {
	b := bucket.NewMem()
	base := time.Now().Add(time.Hour).UnixMilli()
	due := map[abi.ActorID]int64{}
	for i := range 20 {
		due[actor("t", fmt.Sprint(i))] = base + int64(i)
	}
	cluster(t, b, due)
	victim := actor("t", "13").NameHex()
	_, err := inspect.New(failingGets{b, victim}, prefix).Verify(context.Background(), inspect.VerifyOptions{Concurrency: 4})
	if !errors.Is(err, errInjected) {
		t.Fatalf("Verify = %v, want the injected failure", err)
	}
}

var benchActors = flag.Int("verify.actors", 1000, "BenchmarkVerify: how many actors the cluster has")

// BenchmarkVerify times the doctor over a cluster of -verify.actors actors
// on the S3 server, reading states one at a time and 16 at a time.
//
//	go test ./inspect -run '^$' -bench Verify -benchtime 1x -verify.actors 10000
func BenchmarkVerify(b *testing.B) {
	srv := s3test.Start(b).Bucket
	ctx := context.Background()
	base := time.Now().Add(time.Hour).UnixMilli()
	due := map[abi.ActorID]int64{}
	for i := range *benchActors {
		due[actor(fmt.Sprintf("t%d", i%10), fmt.Sprint(i))] = base + int64(i)
	}
	cluster(b, srv, due)
	c := inspect.New(srv, prefix)
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("parallel-%d", n), func(b *testing.B) {
			for b.Loop() {
				rep, err := c.Verify(ctx, inspect.VerifyOptions{Concurrency: n})
				if err != nil || !rep.OK() || rep.Actors != len(due) {
					b.Fatalf("%+v, %v", rep, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/verify")
		})
	}
}
