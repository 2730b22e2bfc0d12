// Package bucket is the object-store interface shared by the alarm index and
// the reference cluster host: a small Bucket interface with conditional PUTs
// and ordered listings, an in-memory implementation with deterministic fault
// injection for unit tests and the simulator, a Counting wrapper that counts
// requests exactly, and a Prefixed view under a key prefix. The S3
// implementation, over aws-sdk-go-v2, is package bucket/s3: this package
// does not depend on the AWS SDK, so neither do the packages that only need
// the interface.
//
// Both implementations follow S3's rules: keys list in byte order, a PUT with
// If-None-Match: * fails if the key exists, a PUT with If-Match fails unless
// the object's ETag matches, deleting a missing key succeeds, and all empty
// objects share one ETag (the MD5 of nothing), so conditions on empty objects
// prove only existence.
package bucket

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by errors for a key that does not exist (S3 404,
// NoSuchKey). Test with errors.Is.
var ErrNotFound = errors.New("object not found")

// ErrPrecondition is wrapped by errors for a conditional PUT whose condition
// did not hold (S3 412 PreconditionFailed, or 409 ConditionalRequestConflict
// when a concurrent conditional write won). Test with errors.Is.
//
// A PUT with If-Match on a key that does not exist fails with an error that
// wraps both ErrPrecondition and ErrNotFound.
var ErrPrecondition = errors.New("precondition failed")

// Cond is the condition of a PUT. The zero value is an unconditional PUT.
// At most one of the two may be set.
type Cond struct {
	// IfNoneMatch sends If-None-Match: *: the PUT succeeds only if the key
	// does not exist.
	IfNoneMatch bool
	// IfMatch, if not empty, sends If-Match: the PUT succeeds only if the
	// object exists with this ETag (as returned by Get or Put).
	IfMatch string
}

// Validate returns an error if the condition is not valid (both fields
// set). Bucket implementations check it before they send a PUT.
func (c Cond) Validate() error {
	if c.IfNoneMatch && c.IfMatch != "" {
		return errors.New("a condition cannot have both IfNoneMatch and IfMatch")
	}
	return nil
}

// Bucket is an S3-like object store. All methods are safe for concurrent use.
// Errors are *OpError values naming the operation, the key and the cause.
type Bucket interface {
	// Get returns the object's body and ETag, or an error wrapping
	// ErrNotFound if the key does not exist.
	Get(ctx context.Context, key string) (body []byte, etag string, err error)
	// Put stores body under key if cond holds and returns the new ETag. A
	// failed condition is an error wrapping ErrPrecondition. Once Put has
	// returned without an error it keeps nothing of body: the caller may
	// reuse it (a node reuses its snapshot buffers).
	Put(ctx context.Context, key string, body []byte, cond Cond) (etag string, err error)
	// Delete removes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteBatch removes keys with multi-object delete requests (S3's
	// DeleteObjects), at most MaxDeleteBatch keys each: one request where
	// Delete would send one per key. Missing keys are not errors. It
	// returns the keys the store removed (or did not have); err, when not
	// nil, is a *BatchError naming the others, or the *OpError of a request
	// that failed as a whole (then no key of that request is reported
	// removed, though some may have been). An empty keys sends nothing.
	DeleteBatch(ctx context.Context, keys []string) (deleted []string, err error)
	// List returns up to limit keys under prefix, in key (byte) order,
	// strictly after startAfter ("" = from the start). limit must be at least
	// 1 and may exceed 1,000: implementations read pages of at most 1,000.
	List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error)
	// ListFolders returns the folders directly under prefix, in byte
	// order, at most limit of them: prefix+segment+"/" for every key that
	// starts prefix+segment+"/" (S3's common prefixes for the delimiter
	// "/"). Keys directly under prefix (with no further "/") are not
	// returned. Each LIST request returns at most MaxPage folders and keys
	// together; limit must be at least 1.
	ListFolders(ctx context.Context, prefix string, limit int) ([]string, error)
}

// Header is implemented by buckets that can read an object's ETag without
// its body (S3's HEAD): Mem, the S3 client, and Counting and Prefixed over
// one of them. Head returns the ETag, or an error wrapping ErrNotFound if
// the key does not exist. Unlike a listing, a HEAD of one key is answered
// with the store's read-after-write consistency, also by stores whose
// listings may leave out a key being overwritten (see Head).
type Header interface {
	Head(ctx context.Context, key string) (etag string, err error)
}

// Head reads key's ETag: a HEAD where b is a Header, else a GET whose body
// is dropped. Decisions that a missing key would change (a node lease
// gone, the snapshot an actor restores) are taken on a read of that key,
// never on a listing alone: an erasure-coded store (MinIO) may leave out
// of a LIST a key that is being overwritten, while its GET and HEAD read
// with quorum.
func Head(ctx context.Context, b Bucket, key string) (string, error) {
	if h, ok := b.(Header); ok {
		return h.Head(ctx, key)
	}
	_, etag, err := b.Get(ctx, key)
	return etag, err
}

// MaxPage is the most keys one LIST request returns (S3's limit). List reads
// pages of at most this many keys.
const MaxPage = 1000

// MaxDeleteBatch is the most keys one multi-object delete request carries
// (S3's limit). DeleteBatch splits longer lists.
const MaxDeleteBatch = 1000

// OpKind names a bucket operation.
type OpKind string

// The bucket operations.
const (
	OpGet OpKind = "GET"
	// OpHead reads an object's ETag without its body (S3: HEAD).
	OpHead   OpKind = "HEAD"
	OpPut    OpKind = "PUT"
	OpDelete OpKind = "DELETE"
	OpList   OpKind = "LIST"
	// OpDeleteBatch is a multi-object delete (S3: POST ?delete).
	OpDeleteBatch OpKind = "DELETE-BATCH"
)

// OpError is the error every Bucket method returns. It names the bucket, the
// operation and the key (for LIST, the prefix), and wraps the cause, so
// errors.Is(err, ErrNotFound) and errors.Is(err, ErrPrecondition) work.
type OpError struct {
	// Bucket is the bucket's name ("mem" for Mem).
	Bucket string
	// Op is the operation that failed.
	Op OpKind
	// Key is the object key, or the prefix for OpList.
	Key string
	// Attempts is how many HTTP requests were sent for the operation (more
	// than one when the client retried). After a retried conditional PUT, an
	// ErrPrecondition may come from the first attempt having landed: callers
	// that must know should read the object back.
	Attempts int
	// Err is the cause.
	Err error
}

// Error describes the failure: bucket, operation, key, cause and attempts.
func (e *OpError) Error() string {
	what := "key"
	if e.Op == OpList {
		what = "prefix"
	}
	s := fmt.Sprintf("bucket %q: %s %s %q: %v", e.Bucket, e.Op, what, e.Key, e.Err)
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (after %d attempts)", e.Attempts)
	}
	return s
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// BatchError is the error of a multi-object delete whose request succeeded
// but the store refused some of its keys.
type BatchError struct {
	// Bucket is the bucket's name.
	Bucket string
	// Failed maps each key the store did not remove to its reason.
	Failed map[string]error
}

// Error names the bucket, how many keys failed, and one of them with its
// reason.
func (e *BatchError) Error() string {
	first := ""
	for k := range e.Failed {
		if first == "" || k < first {
			first = k
		}
	}
	return fmt.Sprintf("bucket %q: %s: %d keys not deleted, such as %q: %v", e.Bucket, OpDeleteBatch, len(e.Failed), first, e.Failed[first])
}

// PagedLister is implemented by buckets that report how many LIST requests
// (pages) each List and ListFolders call sent: Mem, Counting, Prefixed and
// the S3 client of package bucket/s3. Counting uses it to count pages
// exactly under concurrency; a bucket without it counts as one page a call.
type PagedLister interface {
	// ListPaged is List that also returns how many LIST requests it sent.
	ListPaged(ctx context.Context, prefix, startAfter string, limit int) (keys []string, pages int, err error)
	// ListFoldersPaged is ListFolders that also returns how many LIST
	// requests it sent.
	ListFoldersPaged(ctx context.Context, prefix string, limit int) (folders []string, pages int, err error)
}

// CheckLimit returns an error if limit is not a valid List or ListFolders
// limit (at least 1). Bucket implementations check it before they send a
// LIST.
func CheckLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("list limit %d: must be at least 1", limit)
	}
	return nil
}
