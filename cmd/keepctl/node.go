package main

// The verbs that change an alarm go through a node's HTTP API (-node), so
// that each change is an event of the actor's holder: committed, indexed
// and replicated by the same rules as a guest's set-alarm.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/inspect"
)

// envToken is where keepctl reads the node's token when -token-file is not
// given.
const envToken = "KEEPCTL_TOKEN"

// The environment variables that stand for -bucket, -prefix and -node
// when the flag is not given.
const (
	envBucket = "KEEPCTL_BUCKET"
	envPrefix = "KEEPCTL_PREFIX"
	envNode   = "KEEPCTL_NODE"
)

// newNodeClient checks the -node URL and reads the token and the CA.
func newNodeClient(rawURL, tokenFile, caFile string) (*client.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-node %q: want http://HOST:PORT or https://HOST:PORT", rawURL)
	}
	var token string
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return nil, fmt.Errorf("-token-file: %s must hold one token (no spaces)", tokenFile)
		}
	} else {
		token = strings.TrimSpace(os.Getenv(envToken))
	}
	opts := []client.Option{client.WithToken(token)}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca: %s holds no PEM certificate", caFile)
		}
		opts = append(opts, client.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	c, err := client.New(rawURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("-node: %w", err)
	}
	return c, nil
}

// isStatus reports whether err is the node's answer with that status.
func isStatus(err error, status int) bool {
	var p *client.Problem
	return errors.As(err, &p) && p.Status == status
}

// parseAlarmTime reads the TIME of alarm set: RFC 3339, Unix
// milliseconds, or +DURATION from now (+90s, +1h30m).
func parseAlarmTime(s string, now time.Time) (int64, error) {
	if d, ok := strings.CutPrefix(s, "+"); ok {
		dur, err := time.ParseDuration(d)
		if err != nil {
			return 0, fmt.Errorf("time %q: +DURATION wants a Go duration (+90s, +1h30m)", s)
		}
		return now.Add(dur).UnixMilli(), nil
	}
	if s == "" {
		return 0, errors.New("no time given")
	}
	return parseTime(s)
}

func describeState(id abi.ActorID, st client.AlarmState) string {
	alarm := "no alarm"
	if st.AlarmMs != nil {
		alarm = fmt.Sprintf("alarm at %s (%d)", formatMs(*st.AlarmMs), *st.AlarmMs)
	}
	on := ""
	if st.Node != "" {
		on = ", on node " + st.Node
	}
	out := fmt.Sprintf("%s: %s, retry count %d%s", id, alarm, st.RetryCount, on)
	if d := st.DeadLetter; d != nil {
		out += fmt.Sprintf("; dead letter: on-alarm for %s failed its last attempt (%d) at %s: %s", formatMs(d.ScheduledMs), d.Attempts, formatMs(d.FailedMs), d.Error)
	}
	return out
}

// alarmVerb runs alarm get, alarm set, alarm clear and alarm fire.
func alarmVerb(ctx context.Context, c *client.Client, verb string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarm "+verb, stderr)
	asJSON := jsonFlag(fs, "the committed alarm state as the node answered it, one JSON object")
	var pos []string
	// Positional arguments may come before or after the flags.
	for len(args) > 0 {
		if err := parseArgs(fs, args, stdout); err != nil {
			return 2, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	want := 1
	if verb == "set" {
		want = 2
	}
	if len(pos) != want {
		if verb == "set" {
			return 2, fmt.Errorf("%w: want TENANT/CLASS/NAME TIME", errUsage)
		}
		return 2, fmt.Errorf("%w: want one TENANT/CLASS/NAME", errUsage)
	}
	id, err := parseActor(pos[0])
	if err != nil {
		return 2, err
	}
	var st client.AlarmState
	switch verb {
	case "get":
		st, err = c.Alarm(ctx, id)
		if err != nil {
			return 2, fmt.Errorf("actor %s: %w", id, err)
		}
	case "set":
		at, err := parseAlarmTime(pos[1], time.Now())
		if err != nil {
			return 2, err
		}
		st, err = c.SetAlarm(ctx, id, time.UnixMilli(at))
		if err != nil {
			return 2, fmt.Errorf("actor %s: %w", id, err)
		}
	case "clear":
		st, err = c.ClearAlarm(ctx, id)
		if err != nil {
			return 2, fmt.Errorf("actor %s: %w", id, err)
		}
	case "fire":
		st, err = c.FireAlarm(ctx, id)
		if err != nil {
			return 2, fmt.Errorf("actor %s: %w", id, err)
		}
	}
	status := 0
	if st.Fired != nil && st.Fired.Error != "" {
		status = 1 // on-alarm failed: its retry is committed
	}
	if *asJSON {
		return status, writeJSON(stdout, st)
	}
	if f := st.Fired; f != nil {
		switch {
		case !f.Ran:
			fmt.Fprintf(stdout, "%s: on-alarm did not run\n", id)
		case f.Error != "":
			fmt.Fprintf(stdout, "%s: on-alarm failed (retry count %d): %s\n", id, f.RetryCount, f.Error)
		default:
			fmt.Fprintf(stdout, "%s: on-alarm ran for %s\n", id, formatMs(f.ScheduledMs))
		}
	}
	fmt.Fprintln(stdout, describeState(id, st))
	if status != 0 {
		fmt.Fprintf(stderr, "keepctl alarm fire: on-alarm of %s failed\n", id)
	}
	return status, nil
}

// alarmsDelete clears, through the node, the alarm of every actor with an
// index entry the filter keeps, when its committed alarm is within the
// filter too (an entry can be stale: the actor's alarm moved since).
// Each clear names the time it read (DELETE ?if_at_ms=), so an alarm set
// since is left alone.
func alarmsDelete(ctx context.Context, c *inspect.Cluster, nc *client.Client, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarms delete", stderr)
	parse := filterFlags(fs, "due-after", "due-before", "alarms due")
	dryRun := fs.Bool("dry-run", false, "print what would be cleared; change nothing")
	asJSON := jsonFlag(fs, "one JSON object: what was done to each actor, and the counts")
	f, err := parse(args, stdout)
	if err != nil {
		return 2, err
	}
	entries, err := listEntries(ctx, c, f, stderr)
	if err != nil {
		return 2, err
	}
	// One clear per actor, in the order of its earliest entry.
	seen := map[abi.ActorID]bool{}
	var actors []abi.ActorID
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].DueMs < entries[j].DueMs })
	for _, e := range entries {
		if !seen[e.Actor] {
			seen[e.Actor] = true
			actors = append(actors, e.Actor)
		}
	}
	within := func(at int64) bool {
		return (f.DueAfter == 0 || at >= f.DueAfter) && (f.DueBefore == 0 || at <= f.DueBefore)
	}
	var cleared, skipped, failed int
	results := []deleteResult{}
	note := func(id abi.ActorID, result string, at *int64, detail error, text string, args ...any) {
		r := deleteResult{Actor: id.String(), Result: result, AlarmMs: at}
		if detail != nil {
			r.Detail = detail.Error()
		}
		results = append(results, r)
		if !*asJSON {
			fmt.Fprintf(stdout, text+"\n", args...)
		}
	}
	for _, id := range actors {
		st, err := nc.Alarm(ctx, id)
		if err != nil {
			note(id, "failed", nil, err, "FAILED %s: read the alarm: %v", id, err)
			failed++
			continue
		}
		switch {
		case st.AlarmMs == nil:
			note(id, "skipped", nil, errors.New("no alarm committed"), "skip %s: no alarm committed (its entry is stale; the sweep removes it)", id)
			skipped++
			continue
		case !within(*st.AlarmMs):
			note(id, "skipped", st.AlarmMs, errors.New("the committed alarm is outside the filter"), "skip %s: its committed alarm, at %s, is outside the filter (its entry is stale)", id, formatMs(*st.AlarmMs))
			skipped++
			continue
		}
		at := *st.AlarmMs
		if *dryRun {
			note(id, "would_clear", &at, nil, "would clear %s: alarm at %s (%d), retry count %d", id, formatMs(at), at, st.RetryCount)
			cleared++
			continue
		}
		_, err = nc.ClearAlarmAt(ctx, id, at)
		switch {
		case err == nil:
			note(id, "cleared", &at, nil, "cleared %s: alarm at %s (%d)", id, formatMs(at), at)
			cleared++
		case isStatus(err, http.StatusConflict):
			note(id, "skipped", &at, err, "skip %s: its alarm moved since it was read: %v", id, err)
			skipped++
		case isStatus(err, http.StatusNotFound):
			note(id, "skipped", &at, err, "skip %s: %v", id, err)
			skipped++
		default:
			note(id, "failed", &at, err, "FAILED %s: %v", id, err)
			failed++
		}
	}
	switch {
	case *asJSON:
		if err := writeJSON(stdout, deleteReport{DryRun: *dryRun, Matched: len(actors), Cleared: cleared, Skipped: skipped, Failed: failed, Actors: results}); err != nil {
			return 2, err
		}
	case *dryRun:
		fmt.Fprintf(stdout, "dry run: %d actors matched, %d alarms would be cleared, %d skipped, %d failed; nothing changed\n", len(actors), cleared, skipped, failed)
	default:
		fmt.Fprintf(stdout, "%d actors matched, %d alarms cleared, %d skipped, %d failed\n", len(actors), cleared, skipped, failed)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "keepctl alarms delete: %d actors failed\n", failed)
		return 1, nil
	}
	return 0, nil
}

// deleteReport is alarms delete -o json: Cleared counts the alarms that
// would be cleared in a dry run.
type deleteReport struct {
	DryRun  bool           `json:"dry_run"`
	Matched int            `json:"matched"`
	Cleared int            `json:"cleared"`
	Skipped int            `json:"skipped"`
	Failed  int            `json:"failed"`
	Actors  []deleteResult `json:"actors"`
}

// deleteResult is what alarms delete did to one actor: Result is cleared,
// would_clear, skipped or failed, Detail why (for the last two).
type deleteResult struct {
	Actor   string `json:"actor"`
	Result  string `json:"result"`
	AlarmMs *int64 `json:"alarm_ms,omitempty"`
	Detail  string `json:"detail,omitempty"`
}
