// Package hostmod is the host module of wasmkeep alarms: the wasmkeep:alarm
// functions a guest calls (set-alarm, get-alarm, clear-alarm, abi/ABI.md),
// the actor's alarm in its own SQLite database (the _wasmkeep_alarm and
// _wasmkeep_meta tables, committed with the guest's writes), delivery of
// on-alarm with the committed backoff (1 s doubling to 5 min, surviving
// restarts), the runtime checks and the guest configuration a host needs.
// That is all it is: it runs no actor, opens no database and owns no
// runtime.
//
// A wazero host that owns its runtime, its instances and its databases
// uses three pieces (docs/embedding.md, "Add durable alarms to your wazero
// host"; examples/minihost, examples/extism-host; the package's Example
// runs the whole recipe):
//
//   - InstantiateAlarms, or AlarmFunctions for a host that registers its
//     own host functions: the handlers, taking the guest's api.Memory;
//     with no event in the context they answer EPERM, as ABI.md says;
//   - Table, on the host's own *sqlite3.Conn: Begin, End and WithEvent
//     put each event's transaction in the context the guest is called
//     with, one event at a time per connection (NewEvent, for a host that
//     opens its transactions itself);
//   - Table.DeliverAlarm: on-alarm through the host's own instance, with
//     the backoff. CheckRuntime, CheckGuest and GuestConfig set up what a
//     guest needs.
//
// A host that lays out its databases and runs its instances its own way
// goes one level down, to what Table is made of: Rows (the alarm's
// statements on any schema of a connection), Event (Reset, ContextValue:
// one event reused per actor, carried in a context of the host's own) and
// RunDue (the delivery and its backoff, on the host's store and instance).
// Package engine, the actor engine the reference node runs, is one such
// host: it is built on this package's exported API alone.
package hostmod
