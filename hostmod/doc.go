// Package hostmod is the host module of wasmkeep alarms: the wasmkeep:alarm
// functions a guest calls (set-alarm, get-alarm, clear-alarm, abi/ABI.md),
// the actor's alarm in its own SQLite database (the _wasmkeep_alarm and
// _wasmkeep_meta tables, committed with the guest's writes), and delivery of
// on-alarm with the committed backoff (1 s doubling to 5 min, surviving
// restarts).
//
// A wazero host that owns its runtime, its instances and its databases
// uses three pieces (docs/embedding.md, "Add durable alarms to your wazero
// host"; examples/minihost):
//
//   - InstantiateAlarms, or AlarmFunctions for a host that registers its
//     own host functions: the handlers, taking the guest's api.Memory;
//   - Table, on the host's own *sqlite3.Conn: NewEvent and WithEvent put
//     each event's transaction in the context the guest is called with;
//   - Table.DeliverAlarm: on-alarm through the host's own instance, with
//     the backoff. CheckRuntime and GuestConfig set up what a guest needs.
//
// The package also has an engine, for hosts that let it run their actors:
// Engine compiles classes and runs each Actor's instance and database (its
// own VFS, snapshots for replication, residency and memory budgets, and the
// wasmkeep:actor request and data functions). Its events and deliveries go
// through the same handlers and the same delivery code as a Table's.
package hostmod
