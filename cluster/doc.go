// Package cluster is the reference cluster host's ownership layer: node
// leases and per-actor holds, kept in the shared bucket with conditional
// writes, so that at most one node acts for an actor at a time.
//
// A node's right to run an actor (a hold, in the words of the alarm design)
// is two things: an ownership record per actor naming the node
// (<prefix>holds/<tenant>/<class>/<hex name>, see [Holds]) and a valid lease
// of that node (<prefix>nodes/<node id>, see [Leases]). The alarm rules'
// "lease view" is [Holds.Valid]: the hold exists (this node took it and has
// not lost it) and the node lease is valid. Each new hold of an actor has a
// higher generation than every hold before it, and release keeps the
// generation, so generations only grow.
//
// A node ID may be stable across restarts (one per machine or pod). Each
// process has a random instance, written in its lease and in every
// ownership record it writes. A process started under the ID of one that
// crashed takes the ID back only once that one's lease has expired by the
// rule below (see [StartLeases]); from then on the records of the earlier
// instance are void, and any node takes them over at once.
//
// # The margins
//
// Nodes do not share a clock and their wall clocks may be hours apart; the
// only assumption is that each node's clock runs at the rate of real time to
// within [MaxClockDrift]. Every interval below is measured on one machine's
// own (monotonic) clock, and wall-clock readings in lease bodies
// (renewed_ms) are for people only. With TTL, Margin and Grace from
// [LeaseConfig] (defaults 10 s, 1 s and 2 s):
//
//   - The holder. A renewal is a conditional PUT of the node's lease object
//     whose body carries a sequence number that grows with every write, so
//     every version of the object differs from every other (S3 ETags of
//     equal bodies are equal). If the renewal sent at time s (holder's
//     clock) succeeds, the holder is valid until s + TTL - Margin. A renewal
//     that fails, times out or whose answer is lost extends nothing and
//     ends nothing: the holder stays valid until the window of its last
//     confirmed renewal ends, and keeps renewing (see "Renewals that fail"
//     below). A renewal whose answer arrives after the validity it would
//     extend has ended does not extend it (the chain of renewals is
//     broken). A later success starts a new chain, a new lease epoch, and
//     holds taken in an earlier epoch are never valid again: they must be
//     acquired anew, by a conditional write on the ownership record. Only
//     the window running out, the lease object replaced or removed by
//     someone else (ErrLeaseLost), or Close ends validity.
//   - The taker. Another node treats the lease as expired only when it has
//     seen the same version (ETag) in a read it received at f, and again in
//     a read it sent at g >= f + TTL + Grace (taker's clock), where TTL is
//     the one the holder wrote in that very version; or when the lease
//     object is gone, which only a clean shutdown does after the node
//     stopped acting. A read is a GET of the lease or a LIST of the leases
//     showing its ETag (see "Reading leases from a listing"). So a node
//     that has just started watches a lease for TTL + Grace before it can
//     judge it expired, however long the holder has been dead.
//
// Why a lapsed holder stops acting before anyone can take its holds: say the
// taker saw version v received at f and again in a read sent at g >= f +
// TTL + Grace. Version v landed before f, so it was sent at s <= f, and the
// validity it gave ends at s + TTL - Margin. The holder's next renewal in the
// same chain would have had to be answered before that instant, and so to
// land before g; but the object still held v when the read sent at g was
// served, so it did not. Measured in real time, TTL - Margin on a clock
// running fast by the drift bound ends before TTL + Grace on a clock running
// slow by it, which is what [LeaseConfig.Validate] checks: (TTL + Grace)(1 -
// d) > (TTL - Margin)(1 + d) with d = [MaxClockDrift]. The holder is
// therefore no longer valid when the taker decides, and never valid again in
// that epoch. A renewal that lands later starts a new epoch, and the holds
// of the old one are invalid. With the defaults, the holder stops at most 9 s
// after its last successful renewal was sent, and a taker needs at least 12 s
// of its own clock after first seeing that renewal: 3 s to spare, enough for
// about 14% of drift.
//
// # Taking over on a judgement already made
//
// Every ownership record notes, besides the writer's instance, the
// sequence number of the writer's lease version that had last landed to
// its knowledge when it wrote the record (its last confirmed renewal, or an
// earlier renewal it learned had landed late). A taker that has judged a
// version of that instance's lease with sequence number S expired, by the
// rule above and from a read (GET) of that very version, takes a record
// noting S or less without reading the lease again: one GET fewer for each
// of the thousands of actors a dead node leaves. Any other record (a later
// version, another instance, a lease seen removed, none noted) is taken
// only on the fresh read, as before.
//
// Why the holder no longer acts on such a hold. The hold was taken in some
// epoch E of the holder, while it knew of no version later than S. Say E
// were still valid when the taker judged S expired (at its read sent at
// g). E's validity at that instant comes from a renewal confirmed in E
// whose window had not ended; by the argument above, a renewal sent before
// S landed, or S itself, gives a window that ended before g. So E holds a
// renewal that replaced S: sent after S landed (only a writer that knew
// S's ETag could replace it, and sequence numbers grow with every send),
// so with a sequence number above S. It landed after g, since the taker's
// read sent at g still found S, and a renewal answered after the window it
// would extend does not extend it: it starts a new epoch, not E. So E
// ended before g. A hold taken in a later epoch was taken once a renewal
// of that epoch had been confirmed, which replaced S, and its record notes
// that renewal's number or a later one, above S. A later process under the
// node ID writes its own instance, so a record of it never matches the
// earlier one's judgement, whatever numbers its versions carry.
//
// # Reading leases from a listing
//
// Each node reads the others' leases every period with one LIST of
// <prefix>nodes/, which gives every lease's ETag, rather than a GET of each
// (O(N) requests per period in the cluster instead of O(N²)). Every write
// of a lease is a new version with a new ETag (the bodies differ, above),
// so a listing tells a renewed lease from an unchanged one without its
// body: a changed ETag starts the watch of the new version at the
// listing's receipt (f), and an unchanged one confirms the version at the
// listing's send (g), exactly as a GET would. The argument above holds
// word for word with a listing as the read: it needs only that a version
// the read showed was the object's version when the read was served.
//
// A listing's silence is another matter. An erasure-coded store (MinIO)
// may leave out of a LIST a key that is being overwritten, and a lease
// being renewed is exactly such a key; S3's own LIST does not, but the
// argument does not lean on it. So a lease a listing leaves out is only a
// candidate: the node reads that lease's own key (a GET, which such a
// store answers with quorum) and takes the lease for removed only if that
// read finds nothing. A key a listing did show may be read from a drive
// that missed the latest write, but only its absence could shorten a
// judgement: an older ETag shown again reads as a new version, and starts
// the watch afresh.
//
// A listing does not show what a version says: its TTL, address and
// instance. A node GETs a lease the first time it lists it (and after
// seeing it removed), and GETs a version again only once it has stood
// unchanged for half the TTL last read, which a renewing holder's versions
// never do (it renews every TTL/3): so a dead node's last version is read
// once, and a live node's are not read at all. A version is judged expired
// only by the TTL read from that very version; one known only from
// listings is not expired however long it stands, so a later process of
// the node ID writing a longer TTL is never judged by the earlier one's
// (the failure of that GET only puts the judgement off). The address and
// instance kept are those last read, possibly of an earlier process of the
// node ID: Acquire reads the holder's lease afresh before taking a hold
// (unless the record notes a version already judged expired, below), and
// Lookup does before trusting that a record's instance is earlier, as
// before. Live judges freshness from listings alone (a node is live while
// its ETag changed within TTL + Grace, TTL as last read), which is not a
// safety judgement.
//
// On a bucket whose listings carry no ETags ([bucket.InfoLister]) each
// round GETs every other node's lease, as before.
//
// # Reading leases less often
//
// Renewing and reading are separate loops: a node renews every Period and
// reads the others' leases every [LeaseConfig.ObservePeriod], the same
// period unless set. Reading less often changes no judgement above: a
// version is still watched from the receipt of the first reading that
// showed it to the send of the latest, so a longer gap between readings
// only confirms a version later, and a taker judges later, never sooner.
// What it costs is time, and exactly this: a dead node's last version is
// first seen up to one reading period after it landed, and everything
// that follows its death is counted from that sight: its leaving Live
// (TTL + Grace later, which relists its tenants), and the takeover of its
// holds (Acquire's own read confirms the version, but cannot move the
// first sight earlier). So ObservePeriod takes the place of Period in
// those delays and nowhere else; the holder's validity, the margins and
// the renewals' ride-through are the renewal loop's. A node cannot read
// only the leases that matter more often: the version that matters is the
// last of a node that has just died, which cannot be told from a live
// node's until after it has stood.
//
// ObservePeriod + Period must be shorter than TTL + Grace: a live node's
// lease changes between two readings (it renews every Period), and Live
// keeps a node for TTL + Grace after the reading that first showed its
// version, so a reading that fails is tried again before that runs out: a
// Period later, or half of what ObservePeriod leaves of TTL + Grace if
// that is less (2 s with the lease read every 8 s; the other half is for
// the requests' own time). One failed reading then drops no live node out
// of Live, which would relist every tenant.
//
// # Renewals that fail
//
// A renewal that failed may still have landed, and one that timed out may
// land later; neither ends validity, and the argument above still holds,
// because it rests on confirmed renewals alone. Every version of the lease
// object is one of the holder's writes, and each write is conditioned on
// the version it replaces (If-Match), so the versions form one chain and
// each landing changes the object. Validity only ever comes from a renewal
// whose success the holder received: its window is s + TTL - Margin for its
// send time s, and the chain continues only if that answer came before the
// previous window ended. So at any instant the holder is valid, its last
// confirmed renewal C is valid for it, and C (or a later write of the
// chain) is the object's version from C's landing on. A write that failed
// but landed, or lands late, is a new version: a taker watching the object
// sees it change and starts counting TTL + Grace again from when it first
// sees it, which is later than C was sent. It can only put the taker's
// judgement off, never bring it forward, and it never extends the holder's
// validity: only an answer does. When the holder finds its own late write
// in place (its next renewal's If-Match fails and reading the object back
// shows its own instance with a sequence number it sent but never saw
// confirmed), it renews on top of it, its validity where C left it. When
// the If-Match fails and the read shows its own instance with a version
// it knows (an erasure-coded MinIO fails a conditional write while an
// earlier write of the key is still being applied, and reads the version
// before), no one else wrote the object: the renewal failed, nothing
// more. When the store's writes find no object there at all (If-Match on
// a missing key) while its reads show our version, the holder creates it
// anew with If-None-Match. One write alone passes that, as it makes the
// object whole again, and no If-Match on a version read passes before it:
// if it is the holder's, the new version is the chain's next and only
// restarts others' watch; if another process under the node ID got there
// first, the holder's next renewal finds its version and the lease is
// lost. Only a version of another process, or no object for reads, loses
// the lease (Leases.Lost). A taker that judged the lease expired saw one
// version unchanged from f to g >= f + TTL + Grace; the holder's confirmed
// renewals all landed before g, so C landed by f, C was sent by f, and the
// holder's validity ended at C's send + TTL - Margin, before g by the
// drift bound, as above.
//
// The simulator runs these leases and holds (sim.RunLeases) with renewals
// that fail, lose their answer after landing, land late or are slow, with
// pauses, partitions, crashes and clocks drifting by up to MaxClockDrift,
// and checks after every step that no two nodes each hold a valid hold on
// one actor; a variant that takes a failed renewal as confirmed (validity
// past the last confirmed window) is caught within a few seeds.
//
// Margin protects against the holder's clock running slow and its requests
// being slow to return; Grace protects against the taker's clock running
// fast. Neither may be negative, and TTL - Margin must leave room for a
// renewal every period (TTL/3 by default).
//
// Two things the argument needs from the store: reads of a key (GET,
// HEAD) and conditional writes are strongly consistent (S3 is, and so is
// an erasure-coded MinIO at its default quorum), and nothing but the node
// itself writes its lease object. Listings may leave keys out; see
// "Reading leases from a listing". An operator deleting a live node's lease object,
// or deleting an ownership record (which resets its generation), breaks the
// guarantees.
package cluster
