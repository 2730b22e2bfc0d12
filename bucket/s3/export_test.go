package s3

// PutsThroughSDK makes b send its PUTs, GETs and multi-object deletes through
// the SDK's middleware stack, as it did before the lean path, for tests
// and benchmarks that compare the two.
func PutsThroughSDK(b *Bucket) { b.lean = nil }

// HasLeanPut reports whether b sends its PUTs on the lean path.
func HasLeanPut(b *Bucket) bool { return b.lean != nil }

// HasLeanConns reports whether b's lean PUTs go on its own HTTP/1.1
// connections rather than through net/http.
func HasLeanConns(b *Bucket) bool { return b.lean != nil && b.lean.h1 != nil }
