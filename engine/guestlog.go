package engine

import (
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/clock"
)

// Guest output limits: what an actor's stdout and stderr may put in the
// node's log.
const (
	// GuestLogBurst lines at once, then GuestLogRate lines a second per
	// actor and stream; lines beyond are counted and reported once the
	// budget refills.
	GuestLogBurst = 20
	GuestLogRate  = 5
	// GuestLineMax bytes of a line are kept; the rest is cut.
	GuestLineMax = 1024
)

// guestOutput is one actor's stdout or stderr. Each complete line goes to
// the node's log (hclog, with the actor's name, rate limited) and to the
// writer of WithGuestOutput; for stderr, the last line of the current event
// is kept for its error.
type guestOutput struct {
	log    hclog.Logger
	actor  string
	stream string
	also   io.Writer
	clock  clock.Clock

	mu      sync.Mutex
	partial []byte
	last    string
	tokens  float64
	refill  time.Time
	dropped int
}

func newGuestOutput(e *Engine, id abi.ActorID, stream string, also io.Writer) *guestOutput {
	return &guestOutput{log: e.cfg.logger, actor: id.String(), stream: stream, also: also, clock: e.cfg.clock, tokens: GuestLogBurst}
}

// Write takes what the guest wrote; it never fails the guest.
func (g *guestOutput) Write(p []byte) (int, error) {
	if g.also != nil {
		_, _ = g.also.Write(p)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.partial = append(g.partial, p...)
	for {
		i := strings.IndexByte(string(g.partial), '\n')
		if i < 0 {
			if len(g.partial) > GuestLineMax {
				g.line(string(g.partial[:GuestLineMax]))
				g.partial = g.partial[:0]
			}
			return len(p), nil
		}
		g.line(string(g.partial[:i]))
		g.partial = g.partial[i+1:]
	}
}

func (g *guestOutput) line(s string) {
	s = strings.TrimRight(s, "\r")
	if len(s) > GuestLineMax {
		s = s[:GuestLineMax]
	}
	if strings.TrimSpace(s) == "" {
		return
	}
	g.last = s
	now := g.clock.Now()
	if !g.refill.IsZero() {
		g.tokens = min(GuestLogBurst, g.tokens+now.Sub(g.refill).Seconds()*GuestLogRate)
	}
	g.refill = now
	if g.tokens < 1 {
		g.dropped++
		return
	}
	g.tokens--
	if g.dropped > 0 {
		g.log.Warn("guest output dropped over the rate limit", "actor", g.actor, "stream", g.stream, "lines", g.dropped)
		g.dropped = 0
	}
	g.log.Info("guest "+g.stream, "actor", g.actor, "line", s)
}

// takeLast returns the last line written since the previous call and
// forgets it.
func (g *guestOutput) takeLast() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.last
	g.last = ""
	if len(g.partial) > 0 { // a last line without its newline
		s = strings.TrimSpace(string(g.partial))
		g.partial = g.partial[:0]
	}
	return s
}
