// Command keepctl inspects a cluster's alarms in its S3 bucket without
// joining the cluster. It reads the same bucket configuration as keepnode
// (-bucket, -prefix, and AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_REGION from the environment).
//
//	keepctl -bucket wasmkeep alarms list [-tenant T] [-class C] [-due-after TIME] [-due-before TIME] [-json]
//	keepctl -bucket wasmkeep actor inspect TENANT/CLASS/NAME [-json]
//	keepctl -bucket wasmkeep verify [-serves CLASS,...] [-parallel N] [-json]
//	keepctl -bucket wasmkeep backfill
//	keepctl -bucket wasmkeep cluster version [-json]
//	keepctl -bucket wasmkeep cluster finalize [-to N] [-json]
//
// With -node URL it changes alarms through that node's HTTP API (the
// node's token from -token-file or $KEEPCTL_TOKEN), each change an event of
// the actor's holder:
//
//	keepctl -node http://127.0.0.1:7601 alarm set TENANT/CLASS/NAME TIME [-json]
//	keepctl -node http://127.0.0.1:7601 alarm clear TENANT/CLASS/NAME [-json]
//	keepctl -node http://127.0.0.1:7601 alarm fire TENANT/CLASS/NAME [-json]
//	keepctl -bucket wasmkeep -node http://127.0.0.1:7601 alarms delete [-tenant T] [-class C] [-due-after TIME] [-due-before TIME] [-dry-run]
//
// and more (keepctl -help lists every command; each takes -help and
// -o json).
//
// Exit status: 0 on success, 1 when verify finds a committed alarm with no
// entry or a key that is both an object and the folder of other keys,
// alarm fire's on-alarm failed, alarms delete or import failed for an
// actor, actor inspect found no such actor, or cluster finalize refused
// (a live node that does not support the version, or a lower version than
// the cluster's), 2 for bad usage, a failure
// to reach the bucket or the node, or a -prefix under which the bucket
// holds nothing.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/inspect"
)

// opener opens the named bucket.
type opener func(ctx context.Context, name string) (bucket.Bucket, error)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	open := func(ctx context.Context, name string) (bucket.Bucket, error) { return s3.New(ctx, name) }
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, open))
}

// run runs keepctl with args and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, open opener) int {
	fs := flag.NewFlagSet("keepctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // written below
	bucketName := fs.String("bucket", os.Getenv(envBucket), "S3 bucket shared by the cluster (or $"+envBucket+")")
	prefix := fs.String("prefix", cmp.Or(os.Getenv(envPrefix), "cluster/"), "key prefix of the cluster's objects in the bucket (or $"+envPrefix+")")
	nodeURL := fs.String("node", os.Getenv(envNode), "a node's HTTP API (http://HOST:PORT or https://...), for the commands that go through a node (or $"+envNode+")")
	tokenFile := fs.String("token-file", "", "file holding the token for -node (or $"+envToken+"), when the node has tokens")
	caFile := fs.String("ca", "", "PEM file of the CA that signed the node's certificate, for an https -node (default: the system's roots)")
	configFile := fs.String("config", os.Getenv(envConfig), "keepnode's configuration file (or $"+envConfig+"): -bucket, -prefix, -node and -ca from its bucket, prefix, advertise or listen, and tls-ca, where neither a flag nor a variable gives them")
	showVersion := fs.Bool("version", false, "print keepctl's version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeUsage(stdout, fs)
			return 0
		}
		writeUsage(stderr, fs)
		return 2
	}
	if *configFile != "" {
		st, err := readNodeFile(*configFile)
		if err != nil {
			fmt.Fprintf(stderr, "keepctl: -config %s: %v\n", *configFile, err)
			return 2
		}
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for _, s := range []struct {
			flag, env, from string
			to              *string
		}{{"bucket", envBucket, st.bucket, bucketName}, {"prefix", envPrefix, st.prefix, prefix}, {"node", envNode, st.node, nodeURL}, {"ca", "", st.ca, caFile}} {
			if s.from != "" && !given[s.flag] && (s.env == "" || os.Getenv(s.env) == "") {
				*s.to = s.from
			}
		}
	}
	if *showVersion {
		fmt.Fprintln(stdout, version())
		return 0
	}
	rest := fs.Args()
	if len(rest) == 0 {
		writeUsage(stderr, fs)
		return 2
	}
	cmd := rest[0]
	if len(rest) > 1 && (cmd == "alarms" || cmd == "actor" || cmd == "alarm" || cmd == "dead-letters" || cmd == "cluster") {
		cmd += " " + rest[1]
		rest = rest[1:]
	}
	rest = rest[1:]
	spec, ok := lookup(cmd)
	if !ok {
		fmt.Fprintf(stderr, "keepctl: unknown command %q\n\n", cmd)
		writeUsage(stderr, fs)
		return 2
	}
	// Asked for its usage, a command needs neither the bucket nor a node.
	help := slices.ContainsFunc(rest, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "--h" })
	// alarms list reads the bucket, or with -node and no -bucket the
	// node's API (no S3 credentials).
	if cmd == "alarms list" && *bucketName == "" && *nodeURL != "" {
		spec.bucket, spec.node = false, true
	}
	var nc *client.Client
	if spec.node && !help {
		if *nodeURL == "" {
			fmt.Fprintf(stderr, "keepctl %s: needs -node URL, the HTTP API of a node of the cluster\n", cmd)
			return 2
		}
		var err error
		if nc, err = newNodeClient(*nodeURL, *tokenFile, *caFile); err != nil {
			fmt.Fprintf(stderr, "keepctl: %v\n", err)
			return 2
		}
	}
	var c *inspect.Cluster
	var b bucket.Bucket
	if spec.bucket && !help {
		if *bucketName == "" {
			fmt.Fprintf(stderr, "keepctl %s: needs -bucket NAME, the cluster's S3 bucket\n", cmd)
			return 2
		}
		var err error
		if b, err = open(ctx, *bucketName); err != nil {
			fmt.Fprintf(stderr, "keepctl: %v\n", err)
			return 2
		}
		if err := clusterThere(ctx, b, *bucketName, *prefix); err != nil {
			fmt.Fprintf(stderr, "keepctl %s: %v\n", cmd, err)
			return 2
		}
		c = inspect.New(b, *prefix)
	}
	var status int
	var err error
	switch cmd {
	case "dead-letters list":
		status, err = deadLettersList(ctx, nc, rest, stdout, stderr)
	case "dead-letters redrive", "dead-letters ack":
		status, err = deadLettersAct(ctx, nc, strings.TrimPrefix(cmd, "dead-letters "), rest, stdout, stderr)
	case "alarms list":
		if spec.node {
			status, err = alarmsListNode(ctx, nc, rest, stdout, stderr)
			break
		}
		status, err = alarmsList(ctx, c, rest, stdout, stderr)
	case "alarms failed":
		status, err = alarmsFailed(ctx, c, rest, stdout, stderr)
	case "actor inspect":
		status, err = actorInspect(ctx, c, rest, stdout, stderr)
	case "verify":
		status, err = verify(ctx, c, rest, stdout, stderr)
	case "backfill":
		status, err = backfill(ctx, c, rest, stdout, stderr)
	case "alarm get", "alarm set", "alarm clear", "alarm fire":
		status, err = alarmVerb(ctx, nc, strings.TrimPrefix(cmd, "alarm "), rest, stdout, stderr)
	case "alarms delete":
		status, err = alarmsDelete(ctx, c, nc, rest, stdout, stderr)
	case "alarms export":
		status, err = alarmsExport(ctx, c, rest, stdout, stderr)
	case "alarms import":
		status, err = alarmsImport(ctx, nc, rest, os.Stdin, stdout, stderr)
	case "nodes":
		status, err = nodes(ctx, b, *prefix, rest, stdout, stderr)
	case "cluster version":
		status, err = clusterVersion(ctx, b, *prefix, rest, stdout, stderr)
	case "cluster finalize":
		status, err = clusterFinalize(ctx, b, *prefix, rest, stdout, stderr)
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "keepctl %s: %v\n", cmd, err)
		return 2
	}
	return status
}

var errUsage = errors.New("bad usage")

// clusterThere refuses a prefix under which the bucket holds nothing: a
// wrong -prefix or -bucket would otherwise show an empty cluster, as if
// it had no alarms, no nodes and nothing to mend.
func clusterThere(ctx context.Context, b bucket.Bucket, bucketName, prefix string) error {
	keys, err := b.List(ctx, prefix, "", 1)
	if err != nil {
		return fmt.Errorf("bucket %q: listing -prefix %q: %w", bucketName, prefix, err)
	}
	if len(keys) == 0 {
		return fmt.Errorf("no cluster under -prefix %q in bucket %q: nothing is stored there (check -prefix and -bucket; keepnode's default prefix is %q)", prefix, bucketName, "cluster/")
	}
	return nil
}

// parseTime reads RFC 3339 or Unix milliseconds.
func parseTime(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("time %q: want RFC 3339 (2026-11-30T12:00:00Z) or Unix milliseconds", s)
	}
	return t.UnixMilli(), nil
}

func formatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// filterFlags adds -tenant, -class and the two time bounds (named after
// and before, described as what) to fs; the returned function parses args
// with fs (no positional arguments allowed) and reads them into a Filter.
func filterFlags(fs *flag.FlagSet, after, before, what string) func(args []string, stdout io.Writer) (inspect.Filter, error) {
	tenant := fs.String("tenant", "", "only this tenant")
	class := fs.String("class", "", "only this class")
	from := fs.String(after, "", "only "+what+" at or after this time")
	to := fs.String(before, "", "only "+what+" at or before this time")
	return func(args []string, stdout io.Writer) (inspect.Filter, error) {
		if err := parseArgs(fs, args, stdout); err != nil {
			return inspect.Filter{}, err
		}
		if fs.NArg() > 0 {
			return inspect.Filter{}, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
		}
		if *tenant != "" {
			if err := abi.ValidateTenant(*tenant); err != nil {
				return inspect.Filter{}, fmt.Errorf("%w: -tenant: %v", errUsage, err)
			}
		}
		if *class != "" {
			if err := abi.ValidateClass(*class); err != nil {
				return inspect.Filter{}, fmt.Errorf("%w: -class: %v", errUsage, err)
			}
		}
		f := inspect.Filter{Tenant: *tenant, Class: *class}
		var err error
		if f.DueAfter, err = parseTime(*from); err != nil {
			return f, err
		}
		f.DueBefore, err = parseTime(*to)
		return f, err
	}
}

// listEntries lists the index entries the filter keeps, saying on stderr
// which keys under the index it skipped as not entries.
func listEntries(ctx context.Context, c *inspect.Cluster, f inspect.Filter, stderr io.Writer) ([]inspect.Entry, error) {
	entries, malformed, err := c.Alarms(ctx, f)
	for _, k := range malformed {
		fmt.Fprintf(stderr, "keepctl: skipped a key that is not an index entry: %s\n", k)
	}
	return entries, err
}

func alarmsList(ctx context.Context, c *inspect.Cluster, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarms list", stderr)
	parse := filterFlags(fs, "due-after", "due-before", "entries due")
	asJSON := jsonFlag(fs, "one JSON array")
	f, err := parse(args, stdout)
	if err != nil {
		return 2, err
	}
	entries, err := listEntries(ctx, c, f, stderr)
	if err != nil {
		return 2, err
	}
	if *asJSON {
		if entries == nil {
			entries = []inspect.Entry{}
		}
		return 0, writeJSON(stdout, entries)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DUE\tACTOR\tGENERATION\tOBJECT")
	for _, e := range entries {
		gen := strconv.FormatUint(e.Generation, 10)
		if e.Legacy {
			gen = "legacy"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", formatMs(e.DueMs), e.Name, gen, e.Object)
	}
	if err := tw.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "%d entries\n", len(entries))
	return 0, nil
}

func alarmsFailed(ctx context.Context, c *inspect.Cluster, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarms failed", stderr)
	parse := filterFlags(fs, "after", "before", "alarms whose last attempt failed")
	asJSON := jsonFlag(fs, "one JSON array")
	f, err := parse(args, stdout)
	if err != nil {
		return 2, err
	}
	failed, err := c.Failed(ctx, f)
	if err != nil {
		return 2, err
	}
	if *asJSON {
		if failed == nil {
			failed = []inspect.FailedAlarm{}
		}
		return 0, writeJSON(stdout, failed)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAILED	ACTOR	SCHEDULED	ATTEMPTS	ERROR")
	for _, d := range failed {
		msg := strings.ReplaceAll(d.Error, "\n", " ")
		if len(msg) > 120 {
			msg = msg[:117] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", formatMs(d.FailedAt), d.Name, formatMs(d.Scheduled), d.Attempts, msg)
	}
	if err := tw.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "%d alarms given up\n", len(failed))
	return 0, nil
}

func parseActor(s string) (abi.ActorID, error) {
	parts := strings.SplitN(s, "/", 3)
	if len(parts) != 3 {
		return abi.ActorID{}, fmt.Errorf("actor %q: want TENANT/CLASS/NAME", s)
	}
	id := abi.ActorID{Tenant: parts[0], Class: parts[1], Name: parts[2]}
	if err := id.Validate(); err != nil {
		return abi.ActorID{}, err
	}
	return id, nil
}

func actorInspect(ctx context.Context, c *inspect.Cluster, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("actor inspect", stderr)
	asJSON := jsonFlag(fs, "one JSON object")
	// The actor may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if name == "" || fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: want one TENANT/CLASS/NAME", errUsage)
	}
	id, err := parseActor(name)
	if err != nil {
		return 2, err
	}
	info, err := c.Actor(ctx, id)
	if err != nil {
		return 2, err
	}
	if info.Hold == nil && !info.InBucket {
		fmt.Fprintf(stderr, "keepctl actor inspect: actor %s does not exist in this cluster: no hold and no state under the prefix (a request creates it)\n", id)
		return 1, nil
	}
	if *asJSON {
		return 0, writeJSON(stdout, info)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("actor", info.Name)
	if info.Hold != nil {
		who := info.Hold.NodeID
		if who == "" {
			who = "(released)"
		}
		row("hold", fmt.Sprintf("%s, generation %d, instance %s, at %s", who, info.Hold.Generation, info.Hold.Instance, info.Hold.Addr))
	} else {
		row("hold", "(none)")
	}
	if !info.InBucket {
		row("state", "(none in the bucket)")
		return 0, tw.Flush()
	}
	row("snapshot", fmt.Sprintf("%s (generation %d, seq %d)", info.Snapshot, info.Generation, info.Seq))
	if info.Deleted {
		row("state", "deleted")
		return 0, tw.Flush()
	}
	alarm := "(none)"
	if info.AlarmMs != nil {
		alarm = fmt.Sprintf("%s (%d)", formatMs(*info.AlarmMs), *info.AlarmMs)
	}
	row("alarm", alarm)
	row("retry count", strconv.Itoa(info.RetryCount))
	row("alarm_indexed", quoteEmpty(info.AlarmIndexed))
	if info.Named != "" {
		exists := "exists"
		if !info.NamedExists {
			exists = "MISSING"
		}
		row("named entry", info.Named+" ("+exists+")")
	}
	row("owner_fence", quoteEmpty(info.OwnerFence))
	if d := info.DeadLetter; d != nil {
		row("dead letter", fmt.Sprintf("given up at %s after %d attempts, scheduled %s: %s", formatMs(d.FailedAt), d.Attempts, formatMs(d.Scheduled), d.Error))
	}
	row("on-init done", strconv.FormatBool(info.InitDone))
	return 0, tw.Flush()
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

func verify(ctx context.Context, c *inspect.Cluster, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("verify", stderr)
	serves := fs.String("serves", "", "the classes the cluster serves, comma-separated (default: all); entries of others are reported as such")
	asJSON := jsonFlag(fs, "the report as one JSON object")
	parallel := fs.Int("parallel", inspect.DefaultVerifyConcurrency, "how many actors' states to read at once")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	if *parallel < 1 {
		return 2, fmt.Errorf("%w: -parallel %d: want 1 or more", errUsage, *parallel)
	}
	opts := inspect.VerifyOptions{
		Concurrency: *parallel,
		Progress: func(done, total int) {
			if total >= 1000 {
				fmt.Fprintf(stderr, "keepctl verify: read %d of %d actors\n", done, total)
			}
		},
	}
	if *serves != "" {
		set := map[string]bool{}
		for _, s := range strings.Split(*serves, ",") {
			set[strings.TrimSpace(s)] = true
		}
		opts.Serves = func(class string) bool { return set[class] }
	}
	rep, err := c.Verify(ctx, opts)
	if err != nil {
		return 2, err
	}
	status := 0
	if !rep.OK() {
		status = 1
	}
	if *asJSON {
		return status, writeJSON(stdout, rep)
	}
	fmt.Fprintf(stdout, "actors %d, committed alarms %d (named entry present %d, covered by an unnamed entry %d, missing %d), index entries %d, extra %d\n",
		rep.Actors, rep.Alarms, rep.Named, rep.Covered, len(rep.Missing), rep.Entries, len(rep.Extra))
	fmt.Fprintf(stdout, "keys both an object and a folder %d\n", len(rep.Nested))
	fmt.Fprintf(stdout, "requests: %d LIST, %d GET\n", rep.Requests.ListPages, rep.Requests.Get)
	for _, m := range rep.Missing {
		named := "names no entry"
		if m.Named != "" {
			named = "names " + m.Named
		}
		fmt.Fprintf(stdout, "MISSING %s: alarm at %s (%d) has no entry at its time; its state %s (run keepctl backfill)\n", m.Name, formatMs(m.AlarmMs), m.AlarmMs, named)
	}
	for _, x := range rep.Extra {
		detail := ""
		if x.Detail != "" {
			detail = " (" + x.Detail + ")"
		}
		fmt.Fprintf(stdout, "extra %s: %s%s\n", x.Object, x.Reason, detail)
	}
	for _, k := range rep.Malformed {
		fmt.Fprintf(stdout, "malformed %s\n", k)
	}
	for _, n := range rep.Nested {
		how := "listed"
		if n.Hidden {
			how = "hidden from the listing by the store"
		}
		fmt.Fprintf(stdout, "NESTED %s: an object, and the folder of %s (%s); remove or move one of them\n", n.Object, n.Under, how)
	}
	if len(rep.Missing) > 0 {
		fmt.Fprintf(stderr, "keepctl verify: %d committed alarms have no index entry\n", len(rep.Missing))
	}
	if len(rep.Nested) > 0 {
		fmt.Fprintf(stderr, "keepctl verify: %d keys are both an object and the folder of other keys\n", len(rep.Nested))
	}
	return status, nil
}

func backfill(ctx context.Context, c *inspect.Cluster, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("backfill", stderr)
	asJSON := jsonFlag(fs, "the report as one JSON object")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	nonces, err := alarmindex.NewNonceSource(rand.Reader)
	if err != nil {
		return 2, err
	}
	rep, err := c.Backfill(ctx, nonces)
	if *asJSON {
		if rep.Put == nil {
			rep.Put = []string{}
		}
		if werr := writeJSON(stdout, rep); err == nil {
			err = werr
		}
		if err != nil {
			return 2, err
		}
		return 0, nil
	}
	for _, k := range rep.Put {
		fmt.Fprintf(stdout, "listed %s\n", k)
	}
	if err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "actors %d, committed alarms %d, entries listed %d\n", rep.Actors, rep.Alarms, len(rep.Put))
	return 0, nil
}
