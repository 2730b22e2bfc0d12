package main

import (
	"strings"
	"testing"
	"time"
)

// Flag values the demo cannot run with are refused by name before it
// starts a node (a negative -actors made a slice of negative length).
func TestOptionsCheck(t *testing.T) {
	good := options{actors: 60, interval: 3 * time.Second, before: 5 * time.Second, after: 15 * time.Second,
		leaseTTL: 2 * time.Second, margin: 400 * time.Millisecond, grace: time.Second, sweep: time.Second}
	if err := good.check(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		flag string
		set  func(*options)
	}{
		{"-actors", func(o *options) { o.actors = -3 }},
		{"-actors", func(o *options) { o.actors = 0 }},
		{"-interval", func(o *options) { o.interval = 0 }},
		{"-after", func(o *options) { o.after = -time.Second }},
		{"-sweep", func(o *options) { o.sweep = 0 }},
		{"-lease-grace", func(o *options) { o.grace = -time.Second }},
		{"-lease-margin", func(o *options) { o.margin = 3 * time.Second }},
	} {
		o := good
		c.set(&o)
		err := o.check()
		if err == nil || !strings.HasPrefix(err.Error(), c.flag+" ") {
			t.Errorf("%s: %v; want an error naming the flag", c.flag, err)
		}
	}
}
