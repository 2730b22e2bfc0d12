package alarms

import (
	"context"
	"time"
)

// OneNode is most of the Host of a host that runs as one node, named
// Name, on the system clock: it alone is alive. The host adds Take.
type OneNode struct{ Name string }

func (n OneNode) Now() time.Time                              { return time.Now() }
func (n OneNode) After(d time.Duration) <-chan time.Time      { return time.After(d) }
func (n OneNode) Self() string                                { return n.Name }
func (n OneNode) LiveNodes(context.Context) ([]string, error) { return []string{n.Name}, nil }
