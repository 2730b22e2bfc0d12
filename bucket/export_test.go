package bucket

// PutsThroughSDK makes b send its PUTs through the SDK's middleware stack,
// as it did before the lean path, for tests and benchmarks that compare
// the two.
func PutsThroughSDK(b *S3) { b.lean = nil }

// HasLeanPut reports whether b sends its PUTs on the lean path.
func HasLeanPut(b *S3) bool { return b.lean != nil }
