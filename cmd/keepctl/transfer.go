package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/inspect"
)

// exported is one line of alarms export, and of alarms import's input:
// an actor and its committed alarm. A name that is not UTF-8 (JSON
// strings cannot hold it) is in NameHex instead of Name.
type exported struct {
	Tenant  string `json:"tenant"`
	Class   string `json:"class"`
	Name    string `json:"name,omitempty"`
	NameHex string `json:"name_hex,omitempty"`
	AlarmMs *int64 `json:"alarm_ms"`
	// Alarm is AlarmMs in RFC 3339; import reads it when there is no
	// alarm_ms.
	Alarm string `json:"alarm,omitempty"`
	// RetryCount is the alarm's retry count; import does not restore it
	// (setting an alarm starts it at 0).
	RetryCount int `json:"retry_count"`
}

func exportedOf(id abi.ActorID, at int64, retries int) exported {
	e := exported{Tenant: id.Tenant, Class: id.Class, AlarmMs: &at, Alarm: formatMs(at), RetryCount: retries}
	if utf8.ValidString(id.Name) {
		e.Name = id.Name
	} else {
		e.NameHex = hex.EncodeToString([]byte(id.Name))
	}
	return e
}

// actor is the line's actor, or an error naming what is wrong with it.
func (e exported) actor() (abi.ActorID, error) {
	id := abi.ActorID{Tenant: e.Tenant, Class: e.Class, Name: e.Name}
	switch {
	case e.Name != "" && e.NameHex != "":
		return id, errors.New(`both "name" and "name_hex": give one`)
	case e.NameHex != "":
		b, err := hex.DecodeString(e.NameHex)
		if err != nil {
			return id, fmt.Errorf(`"name_hex" %q is not hex`, e.NameHex)
		}
		id.Name = string(b)
	}
	return id, id.Validate()
}

// at is the line's alarm time, or an error naming what is wrong with it.
func (e exported) at() (int64, error) {
	var at int64
	switch {
	case e.AlarmMs != nil:
		at = *e.AlarmMs
		if e.Alarm != "" {
			t, err := time.Parse(time.RFC3339Nano, e.Alarm)
			if err != nil || t.UnixMilli() != at {
				return 0, fmt.Errorf(`"alarm" %q is not the instant of "alarm_ms" %d`, e.Alarm, at)
			}
		}
	case e.Alarm != "":
		t, err := time.Parse(time.RFC3339Nano, e.Alarm)
		if err != nil {
			return 0, fmt.Errorf(`"alarm" %q is not an RFC 3339 time`, e.Alarm)
		}
		at = t.UnixMilli()
	default:
		return 0, errors.New(`no time: give "alarm_ms" or "alarm"`)
	}
	if at < 0 || at > alarmindex.MaxDueMs {
		return 0, fmt.Errorf("alarm time %d is outside 0..%d (Unix ms)", at, int64(alarmindex.MaxDueMs))
	}
	return at, nil
}

// alarmsExport writes, as JSON lines, the committed alarm of every actor
// with an index entry the filter keeps, from its latest state in the
// bucket, when that alarm is within the filter too (an entry can be
// stale).
func alarmsExport(ctx context.Context, c *inspect.Cluster, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarms export", stderr)
	parse := filterFlags(fs, "due-after", "due-before", "alarms due")
	fs.Bool("json", true, "JSON lines (the only output)")
	fs.Func("o", "`format` of the output: json (the only one: JSON lines)", func(v string) error {
		if v != "json" {
			return fmt.Errorf("-o %q: alarms export writes JSON lines only", v)
		}
		return nil
	})
	f, err := parse(args, stdout)
	if err != nil {
		return 2, err
	}
	entries, err := listEntries(ctx, c, f, stderr)
	if err != nil {
		return 2, err
	}
	seen := map[abi.ActorID]bool{}
	var actors []abi.ActorID
	for _, e := range entries {
		if !seen[e.Actor] {
			seen[e.Actor] = true
			actors = append(actors, e.Actor)
		}
	}
	sort.Slice(actors, func(i, j int) bool { return actors[i].String() < actors[j].String() })
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	var n, stale int
	for _, id := range actors {
		info, err := c.Actor(ctx, id)
		if err != nil {
			return 2, fmt.Errorf("actor %s: %w", id, err)
		}
		if info.Deleted || info.AlarmMs == nil || (f.DueAfter != 0 && *info.AlarmMs < f.DueAfter) || (f.DueBefore != 0 && *info.AlarmMs > f.DueBefore) {
			stale++
			continue
		}
		if err := enc.Encode(exportedOf(id, *info.AlarmMs, info.RetryCount)); err != nil {
			return 2, err
		}
		n++
	}
	if err := out.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stderr, "keepctl alarms export: %d alarms; %d actors whose entry is stale skipped\n", n, stale)
	return 0, nil
}

// maxImportLine bounds a line of alarms import's input.
const maxImportLine = 64 << 10

// alarmsImport sets, through the node, the alarm of each actor in the
// JSON lines of in (or -f FILE). Every line is read and checked before
// any alarm is set: a malformed line, or an actor given twice, is an
// error naming the line, and nothing is changed.
func alarmsImport(ctx context.Context, nc *client.Client, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarms import", stderr)
	file := fs.String("f", "", "the JSON lines to import (default: standard input)")
	dryRun := fs.Bool("dry-run", false, "check the input and print what would be set; change nothing")
	asJSON := jsonFlag(fs, "one JSON object: what was done to each actor, and the counts")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	in, name := stdin, "standard input"
	if *file != "" {
		fh, err := os.Open(*file)
		if err != nil {
			return 2, err
		}
		defer fh.Close()
		in, name = fh, *file
	}
	type line struct {
		no int
		id abi.ActorID
		at int64
	}
	var lines []line
	var bad []string
	first := map[abi.ActorID]int{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 4096), maxImportLine)
	for no := 1; sc.Scan(); no++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.DisallowUnknownFields()
		var e exported
		if err := dec.Decode(&e); err != nil || dec.More() {
			if err == nil {
				err = errors.New("more than one JSON value")
			}
			bad = append(bad, fmt.Sprintf("line %d: not an exported alarm: %v", no, err))
			continue
		}
		id, err := e.actor()
		if err != nil {
			bad = append(bad, fmt.Sprintf("line %d: %v", no, err))
			continue
		}
		at, err := e.at()
		if err != nil {
			bad = append(bad, fmt.Sprintf("line %d: actor %s: %v", no, id, err))
			continue
		}
		if prev, ok := first[id]; ok {
			bad = append(bad, fmt.Sprintf("line %d: actor %s is also on line %d", no, id, prev))
			continue
		}
		first[id] = no
		lines = append(lines, line{no, id, at})
	}
	if err := sc.Err(); err != nil {
		return 2, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(bad) > 0 {
		const most = 10
		n, more := len(bad), ""
		if n > most {
			more = fmt.Sprintf("\n(and %d more)", n-most)
			bad = bad[:most]
		}
		return 2, fmt.Errorf("%s: %d bad lines, nothing imported:\n%s%s", name, n, strings.Join(bad, "\n"), more)
	}
	var set, skipped, failed int
	results := []deleteResult{}
	note := func(id abi.ActorID, result string, at int64, detail error, text string, args ...any) {
		r := deleteResult{Actor: id.String(), Result: result, AlarmMs: &at}
		if detail != nil {
			r.Detail = detail.Error()
		}
		results = append(results, r)
		if !*asJSON {
			fmt.Fprintf(stdout, text+"\n", args...)
		}
	}
	for _, l := range lines {
		if *dryRun {
			note(l.id, "would_set", l.at, nil, "would set %s: alarm at %s (%d)", l.id, formatMs(l.at), l.at)
			set++
			continue
		}
		_, err := nc.SetAlarm(ctx, l.id, time.UnixMilli(l.at))
		switch {
		case err == nil:
			note(l.id, "set", l.at, nil, "set %s: alarm at %s (%d)", l.id, formatMs(l.at), l.at)
			set++
		case isStatus(err, http.StatusNotFound):
			note(l.id, "skipped", l.at, err, "skip %s (line %d): %v", l.id, l.no, err)
			skipped++
		default:
			note(l.id, "failed", l.at, err, "FAILED %s (line %d): %v", l.id, l.no, err)
			failed++
		}
	}
	switch {
	case *asJSON:
		if err := writeJSON(stdout, importReport{DryRun: *dryRun, Lines: len(lines), Set: set, Skipped: skipped, Failed: failed, Actors: results}); err != nil {
			return 2, err
		}
	case *dryRun:
		fmt.Fprintf(stdout, "dry run: %d alarms read, %d would be set; nothing changed\n", len(lines), set)
	default:
		fmt.Fprintf(stdout, "%d alarms read, %d set, %d skipped, %d failed\n", len(lines), set, skipped, failed)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "keepctl alarms import: %d actors failed\n", failed)
		return 1, nil
	}
	return 0, nil
}

// importReport is alarms import -o json: Set counts the alarms that would
// be set in a dry run; each actor's Result is set, would_set, skipped or
// failed.
type importReport struct {
	DryRun  bool           `json:"dry_run"`
	Lines   int            `json:"lines"`
	Set     int            `json:"set"`
	Skipped int            `json:"skipped"`
	Failed  int            `json:"failed"`
	Actors  []deleteResult `json:"actors"`
}
