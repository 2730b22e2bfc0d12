package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/cluster"
)

// Forwarded entries (docs/design.md#stale-forward): a walker's delivery of
// an overdue entry its sweep listed finds the actor held by another node,
// and sends the entry there; the holder removes it if no state names it.
// The holder of an actor that keeps re-arming may walk none of its
// tenant's index (it is no walker), so without this a stale entry of such
// an actor stayed as long as the holder kept the actor.

// OfferBody is the body of POST .../alarm:offer: an index entry's time
// (Unix ms), and whether a legacy key was among the keys listed there.
type OfferBody struct {
	AtMs   int64 `json:"at_ms"`
	Legacy bool  `json:"legacy,omitempty"`
}

// OfferState is the answer of POST .../alarm:offer: what the holder did
// with the entry time (alarms.OfferOutcome: removed, armed, kept or
// skipped), and the node that answered.
type OfferState struct {
	Outcome string `json:"outcome"`
	Node    string `json:"node,omitempty"`
}

// offerTimeout bounds a forward of an entry to its holder: a removal is a
// take of an actor the holder has (or a restore), a LIST and DELETEs.
const offerTimeout = 30 * time.Second

func (n *Node) handleOffer(w http.ResponseWriter, r *http.Request) {
	id, err := actorFrom(r)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxAlarmBody+1))
	var b OfferBody
	if err == nil {
		err = parseOffer(body, &b)
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("actor %s: offer an index entry: %v", id, err))
		return
	}
	if n.leases == nil {
		writeProblem(w, http.StatusNotFound, CodeNotFound, "a node running alone keeps no alarm index")
		return
	}
	start := time.Now()
	out, err := n.plugin.OfferEntry(r.Context(), alarmindex.Key{Actor: id, DueMs: b.AtMs, Legacy: b.Legacy})
	if err != nil {
		// Another node holds the actor now: forwarded once more (a
		// client's call) or answered as not applied (a peer's); any other
		// failure as any event's.
		n.fail(w, r, start, body, err)
		return
	}
	st := OfferState{Outcome: string(out), Node: n.leases.NodeID()}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(st)
}

// parseOffer reads the body of POST .../alarm:offer.
func parseOffer(body []byte, b *OfferBody) error {
	if len(body) > MaxAlarmBody {
		return fmt.Errorf("the body is over %d bytes", MaxAlarmBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(b); err != nil {
		return fmt.Errorf(`the body is not {"at_ms": N}: %v`, err)
	}
	if b.AtMs <= 0 {
		return errors.New(`the body needs "at_ms", a positive time in Unix milliseconds`)
	}
	return nil
}

// Forward sends an overdue entry this node's sweep listed to the node
// holding the actor, which notHere (the error of Take) names
// (alarms.Forwarder).
func (h clusterHost) Forward(ctx context.Context, entry alarmindex.Key, notHere error) error {
	var held *cluster.HeldElsewhereError
	if !errors.As(notHere, &held) || held.Addr == "" {
		return fmt.Errorf("no holder to forward to: %w", notHere)
	}
	return h.n.offer(ctx, held.Addr, entry)
}

// offer POSTs entry to .../alarm:offer on the node at addr, as a
// forwarded call with the peer token.
func (n *Node) offer(ctx context.Context, addr string, entry alarmindex.Key) error {
	if !n.sec.open && n.sec.peerTok == "" {
		return errors.New("the API needs a token and this node has no peer token to forward with (-peer-token-file)")
	}
	body, _ := json.Marshal(OfferBody{AtMs: entry.DueMs, Legacy: entry.Legacy})
	ctx, cancel := context.WithTimeout(ctx, offerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.sec.scheme+"://"+addr+offerPath(entry.Actor), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(forwardedHeader, "1")
	if n.sec.peerTok != "" {
		req.Header.Set("Authorization", "Bearer "+n.sec.peerTok)
	}
	endSpan := n.startForward(req, addr) // the delivery's trace goes on at the holder
	resp, err := n.sec.client.Do(req)
	if err != nil {
		endSpan(0, err)
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("the holder at %s answered %d: %s", addr, resp.StatusCode, bytes.TrimSpace(msg))
		endSpan(resp.StatusCode, err)
		return err
	}
	endSpan(resp.StatusCode, nil)
	var st OfferState
	if err := json.Unmarshal(msg, &st); err != nil {
		return fmt.Errorf("the holder at %s: %w", addr, err)
	}
	n.log.Debug("forwarded an overdue index entry to the actor's holder", "actor", entry.Actor.String(), "due_ms", entry.DueMs, "holder", st.Node, "outcome", st.Outcome)
	return nil
}

// offerPath is the path of POST .../alarm:offer for the actor.
func offerPath(id abi.ActorID) string {
	return "/v1/actors/" + url.PathEscape(id.Tenant) + "/" + url.PathEscape(id.Class) + "/" + url.PathEscape(id.Name) + "/alarm:offer"
}

var _ alarms.Forwarder = clusterHost{}
