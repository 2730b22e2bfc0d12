// Package seam hands package engine what the plugin does not export: the
// replication split around an upload that is not one call. A host
// replicates with alarms.Plugin.Replicate, which carries out every step in
// order and cannot be called in a wrong one; the engine records the index
// entry in the event's own commit, before the upload, so it needs the steps
// before the upload and the ones after it apart.
package seam

// BeforeUpload is set by package alarms (its init) to
//
//	func(*alarms.Plugin, context.Context, alarms.Actor, alarms.UploadKind) (after func(context.Context) error, err error)
//
// which PUTs and records the entry for the committed alarm; after, called
// once the upload succeeded, re-checks the hold and DELETEs the entry the
// upload replaced. This package cannot name those types (package alarms
// imports it), so package engine asserts the type once, at its own init.
var BeforeUpload any
