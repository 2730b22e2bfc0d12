package main

import (
	"time"

	"github.com/wasmkeep/alarms/engine"
)

// deadlineFlag is -alarm-deadline or -event-deadline: "D" for every class,
// "CLASS=D" for one, comma-separated or repeated ("5s,batch=1m").
type deadlineFlag struct {
	perClass[time.Duration]
	name string
	// every and class make the engine's options.
	every func(time.Duration) engine.Option
	class func(string, time.Duration) engine.Option
}

func newDeadlineFlag(name string, def time.Duration, every func(time.Duration) engine.Option, class func(string, time.Duration) engine.Option) *deadlineFlag {
	return &deadlineFlag{perClass: perClass[time.Duration]{all: def}, name: name, every: every, class: class}
}

func (f *deadlineFlag) String() string {
	if f == nil {
		return "0s"
	}
	return f.format(time.Duration.String)
}

func (f *deadlineFlag) Set(v string) error {
	return f.set(v, "a positive duration, as D or CLASS=D", func(s string) (time.Duration, bool) {
		d, err := time.ParseDuration(s)
		return d, err == nil && d > 0
	})
}

// options returns the engine's options for the deadlines, refusing a
// class that is not served.
func (f *deadlineFlag) options(served classFlags) ([]engine.Option, error) {
	return f.perClass.options(f.name, served, time.Duration.String, func(class string, d time.Duration) engine.Option {
		if class == "" {
			return f.every(d)
		}
		return f.class(class, d)
	})
}
