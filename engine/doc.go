// Package engine is an actor engine built on package hostmod: one host of
// the alarm host module, the one the reference node (package node) runs.
// It compiles actor classes (Engine.Compile) and runs each actor (Actor)
// in an instance of its class with its own SQLite database:
//
//   - the store: each actor's database attached to a pooled connection, on
//     a VFS of its own, in WAL mode with the commit rules of OpenStore;
//     snapshots of the committed database for replication (Store.Snapshot,
//     CheckSnapshot, WriteSnapshot) and the WAL scan that reads a sleeping
//     actor's alarm without opening it (ReadAlarm);
//   - residency and memory budgets: how many databases and instances stay
//     open, and how much linear memory the instances hold (WithMaxOpenDatabases,
//     WithMaxInstances, WithMaxTotalMemory), with their metrics
//     (WithRegisterer);
//   - the wasmkeep:actor module: the request, the response, the guest's
//     key-value table and its identity, beside hostmod's wasmkeep:alarm;
//   - the guests' output (WithGuestOutput) and their deadlines;
//   - the guest slots: at most so many guest calls at once, fewer than the
//     Go runtime's processors, shared fairly between tenants
//     (WithGuestSlots, WithTenantWeights; package fair), so that no
//     tenant's guests, spinning or hanging, hold up another tenant's or the
//     node's own work.
//
// Alarms are hostmod's: the engine's events carry a hostmod.Event in the
// context of each call, its store is hostmod.Rows in the actor's database,
// and its deliveries run hostmod.RunDue, so the alarm functions, their
// errnos and the committed backoff are the same code a host with its own
// runtime and databases runs (hostmod.Table). RunAlarm and RunSetAlarm
// replicate the engine's alarm events with the plugin (package alarms).
package engine
