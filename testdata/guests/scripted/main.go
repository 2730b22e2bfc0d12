// Command scripted is a test guest for hosts: each request is a command, and
// the on-alarm behaviour is chosen by a request beforehand.
//
// Requests (text bodies; the response is given after the arrow):
//
//	set <ms>      SetAlarm(ms)                    -> ok, or the error text
//	clear         ClearAlarm()                    -> ok, or the error text
//	get           GetAlarm()                      -> ms in decimal, or none
//	put <k> <v>   Put(k, v); v may hold spaces     -> ok
//	getkv <k>     Get(k)                          -> the value, or none
//	mode <spec>   store the on-alarm behaviour    -> ok
//	fail          Put("x", "y"), then fail the request (its writes roll back)
//	init?         -> yes if on-init ran (key "inited" exists), else no
//	calls         -> how many times on-alarm was called in this instance
//	self          -> the actor's identity, tenant/class/name (wasmkeep.Self)
//	rand          -> what the runtime's random numbers give, one line each:
//	                 math/rand's Uint64, math/rand/v2's, the orders in which
//	                 a map made at initialisation and one made now iterate
//	                 (8 times each)
//
// Anything else fails the request. A host error in a command other than set
// and clear fails the request too.
//
// on-init puts "inited" = "1".
//
// on-alarm first appends "<scheduled_ms>:<retry_count>" to the key "log"
// (space separated), then follows the mode (default "ok"): a comma-separated
// list of steps run in order:
//
//	ok          return success
//	fail        return an error
//	set:<ms>    SetAlarm(ms); an error from it fails the event
//	clear       ClearAlarm(); likewise
//	panic       panic, which traps and ends the instance
//
// so "set:5000,fail" sets an alarm and then fails. A failed event's writes
// roll back, the log entry included: the log lists successful runs only, and
// the in-memory count (request "calls") counts every call.
package main

import (
	"errors"
	"fmt"
	randv1 "math/rand"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
)

// alarmCalls counts on-alarm calls in this instance, failed ones included.
var alarmCalls int

func init() {
	wasmkeep.HandleInit(func() error { return wasmkeep.Put("inited", []byte("1")) })
	wasmkeep.HandleRequest(onRequest)
	wasmkeep.HandleAlarm(onAlarm)
}

// main is never run: the module is a reactor.
func main() {}

func onRequest(req []byte) ([]byte, error) {
	cmd, arg, _ := strings.Cut(string(req), " ")
	switch cmd {
	case "set":
		ms, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("set: bad time %q", arg)
		}
		return okOrText(wasmkeep.SetAlarm(time.UnixMilli(ms))), nil
	case "clear":
		return okOrText(wasmkeep.ClearAlarm()), nil
	case "get":
		at, err := wasmkeep.GetAlarm()
		if errors.Is(err, wasmkeep.ErrNotSet) {
			return []byte("none"), nil
		}
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(nil, at.UnixMilli(), 10), nil
	case "put":
		k, v, ok := strings.Cut(arg, " ")
		if !ok {
			return nil, fmt.Errorf("put: want a key and a value, got %q", arg)
		}
		if err := wasmkeep.Put(k, []byte(v)); err != nil {
			return nil, err
		}
		return []byte("ok"), nil
	case "getkv":
		v, err := wasmkeep.Get(arg)
		if errors.Is(err, wasmkeep.ErrNotFound) {
			return []byte("none"), nil
		}
		return v, err
	case "mode":
		if err := wasmkeep.Put("mode", []byte(arg)); err != nil {
			return nil, err
		}
		return []byte("ok"), nil
	case "fail":
		if err := wasmkeep.Put("x", []byte("y")); err != nil {
			return nil, err
		}
		return nil, errors.New("failing on request, as asked")
	case "init?":
		_, err := wasmkeep.Get("inited")
		switch {
		case err == nil:
			return []byte("yes"), nil
		case errors.Is(err, wasmkeep.ErrNotFound):
			return []byte("no"), nil
		}
		return nil, err
	case "calls":
		return strconv.AppendInt(nil, int64(alarmCalls), 10), nil
	case "self":
		id, err := wasmkeep.Self()
		return []byte(id.String()), err
	case "rand":
		return randomness(), nil
	}
	return nil, fmt.Errorf("unknown command %q", cmd)
}

func okOrText(err error) []byte {
	if err != nil {
		return []byte(err.Error())
	}
	return []byte("ok")
}

func onAlarm(scheduled time.Time, retryCount int) error {
	alarmCalls++
	entry := strconv.FormatInt(scheduled.UnixMilli(), 10) + ":" + strconv.Itoa(retryCount)
	log, err := wasmkeep.Get("log")
	switch {
	case errors.Is(err, wasmkeep.ErrNotFound):
		log = []byte(entry)
	case err != nil:
		return err
	default:
		log = append(append(log, ' '), entry...)
	}
	if err := wasmkeep.Put("log", log); err != nil {
		return err
	}
	mode := "ok"
	if m, err := wasmkeep.Get("mode"); err == nil {
		mode = string(m)
	} else if !errors.Is(err, wasmkeep.ErrNotFound) {
		return err
	}
	for _, step := range strings.Split(mode, ",") {
		name, arg, _ := strings.Cut(strings.TrimSpace(step), ":")
		switch name {
		case "ok":
			return nil
		case "fail":
			return fmt.Errorf("mode %q: failing on alarm, as asked", mode)
		case "set":
			ms, err := strconv.ParseInt(arg, 10, 64)
			if err != nil {
				return fmt.Errorf("mode %q: bad time %q", mode, arg)
			}
			if err := wasmkeep.SetAlarm(time.UnixMilli(ms)); err != nil {
				return err
			}
		case "clear":
			if err := wasmkeep.ClearAlarm(); err != nil {
				return err
			}
		case "panic":
			panic("scripted guest: panicking on alarm, as asked")
		default:
			return fmt.Errorf("mode %q: unknown step %q", mode, step)
		}
	}
	return nil
}

// initMap is a map made at initialisation (in an image, before it was
// captured).
var initMap = map[int]bool{}

func init() {
	for i := range 32 {
		initMap[i] = true
	}
}

// randomness is the answer of "rand".
func randomness() []byte {
	order := func(m map[int]bool) string {
		s := ""
		for range 8 {
			for k := range m {
				s += strconv.Itoa(k) + ","
				break // the first key: where the iteration starts
			}
		}
		return s
	}
	fresh := map[int]bool{}
	for i := range 32 {
		fresh[i] = true
	}
	return fmt.Appendf(nil, "v1 %d\nv2 %d\ninit %s\nfresh %s", randv1.Uint64(), rand.Uint64(), order(initMap), order(fresh))
}
