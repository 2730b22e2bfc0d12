// Package alarmindex is the pure core of the alarm index in the bucket: the
// key format of index entries, the nonces that make every key fresh, and the
// rules that keep the index equal to each actor's committed alarm (R1-R4 and
// the fence). It does no I/O and reads no clock.
//
// # Keys
//
// A tagged entry is
//
//	alarms/<tenant>/<due ms, 15 digits>/<class>.t/<name as hex>/<generation, 20 digits>-<nonce as hex>
//
// and an entry written before tags existed (legacy) is
//
//	alarms/<tenant>/<due ms, 15 digits>/<class>/<name as hex>
//
// [Key], [ParseKey] and [Key.String] convert between the two views; the
// actor's database records which entry stands for its alarm in the
// alarm_indexed meta ([FormatRecorded], [ParseRecorded]).
//
// # Facts in, decisions out
//
// As in etcd's raft library, where the protocol is a state machine and the
// caller does the storage and the network, the rules here take facts the
// caller gathered (the committed alarm, the recorded entry, the hold's
// generation, whether the hold is valid, whether it has uploaded, whether the
// bucket had the actor, a listing) and return a plan: the PUTs, meta writes,
// uploads and DELETEs to make, in order. The host executes plans against the
// real bucket and database; the deterministic simulator executes the same
// plans against a model with late requests and crashes, and turns single
// safety rules off (through the module's internal package variant, never
// through this package's API) to show that it catches each.
//
// The plans:
//
//   - [Rules.AfterEvent] (and [Rules.MidEventUpload] for exec-durable): after
//     an event commits and before it is replicated.
//   - [Rules.FirstUpload]: before an actor's first snapshot reaches the
//     bucket (R4).
//   - [Rules.Deliver] and [DeliveryPlan.StaleDeletes]: when an entry is
//     delivered (by the node's timer or a sweep).
//
// Every error the rules return wraps [ErrGiveUp]: the node gives the actor up
// rather than replicate an alarm no other node could find.
//
// [AfterFailure] and [RetryDelay] are the committed-retry arithmetic.
package alarmindex
