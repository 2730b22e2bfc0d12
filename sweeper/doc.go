// Package sweeper finds alarms that no node is firing and hands them to a
// node's timer ([Timer], the in-memory schedule that fires due alarms).
//
// Every node lists a pending alarm in the bucket's index under a key that
// starts with its due time. Every alarm_sweep period, each node walks each
// tenant's index up to "now minus (lease + grace)", plans which of the
// overdue entries it delivers, and offers those to its timer:
//
//   - The walk ([Walk]) is a pure state machine over LIST pages: it stops at
//     the first entry not that overdue, reads at most 2,048 entries, skips
//     malformed keys, and leaves a cursor so the next sweep resumes after the
//     last entry it read (entries nobody can act on cannot hold the rest
//     back). When it reaches the end, the cursor resets to the beginning.
//   - The planner ([PlanSweep]) shares entries between live nodes by
//     rendezvous hashing of the actor over node addresses ([Shard]), makes an
//     entry overdue three margins anyone's, and caps a sweep at 256
//     deliveries: own entries first, an eighth kept for anyone's, taken from
//     a seeded random rotation.
//   - The loop ([Loop]) does the I/O: LIST calls through a [Lister], time
//     through a [clock.Clock], deliveries to a [Sink], live nodes from a
//     [LiveNodes] provider. It walks up to Config.Concurrency tenants at
//     once (32 by default) and plans each tenant as its walk ends, one
//     plan at a time. A tenant whose plan the cap cut short is walked
//     again as soon as the node has delivered most of it
//     (Config.Pending), so a backlog drains at the node's pace.
//
// The walk and the planner take no clock, do no I/O and use no global
// randomness, so the simulator runs them unchanged.
package sweeper
