package main

// The tenant's dead letters and alarms through a node's HTTP API (-node):
// no S3 credentials, only the node's token (a tenant's token will do for
// its tenant).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
)

// deadLettersList prints every dead letter of the tenant, page by page.
func deadLettersList(ctx context.Context, nc *client.Client, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("dead-letters list", stderr)
	tenant := fs.String("tenant", "", "the tenant (required)")
	class := fs.String("class", "", "only this class")
	asJSON := jsonFlag(fs, "one JSON array of the dead letters")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	if err := needTenant(fs, *tenant); err != nil {
		return 2, err
	}
	all := []client.DeadLetter{}
	for o := (client.ListOptions{Class: *class, Limit: 1000}); ; {
		page, err := nc.DeadLetters(ctx, *tenant, o)
		if err != nil {
			return 2, fmt.Errorf("tenant %s: %w", *tenant, err)
		}
		all = append(all, page.DeadLetters...)
		if o.Cursor = page.NextCursor; o.Cursor == "" {
			break
		}
	}
	if *asJSON {
		return 0, writeJSON(stdout, all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTOR\tSCHEDULED\tGIVEN UP\tATTEMPTS\tERROR")
	for _, d := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", d.Actor(), formatMs(d.ScheduledMs), formatMs(d.FailedMs), d.Attempts, d.Error)
	}
	if err := tw.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "%d dead letters\n", len(all))
	return 0, nil
}

func needTenant(fs *flag.FlagSet, tenant string) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
	}
	if tenant == "" {
		return fmt.Errorf("%w: -tenant T is required", errUsage)
	}
	if err := abi.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("%w: -tenant: %v", errUsage, err)
	}
	return nil
}

// deadLettersAct redrives or acknowledges the dead letters of one actor
// (-actor), a class (-class) or the whole tenant (-all), calling again
// while the node says there are more and the last call did something.
func deadLettersAct(ctx context.Context, nc *client.Client, verb string, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("dead-letters "+verb, stderr)
	tenant := fs.String("tenant", "", "the tenant (with -class or -all)")
	class := fs.String("class", "", "every dead letter of this class")
	actor := fs.String("actor", "", "one actor's, TENANT/CLASS/NAME")
	all := fs.Bool("all", false, "every dead letter of the tenant")
	dryRun := fs.Bool("dry-run", false, "print what would be done; change nothing")
	asJSON := jsonFlag(fs, "one JSON object per call the node answered")
	if err := parseArgs(fs, args, stdout); err != nil {
		return 2, err
	}
	sel := client.DeadLetterSelect{Class: *class, All: *all, DryRun: *dryRun}
	switch {
	case *actor != "":
		if *tenant != "" || *class != "" || *all {
			return 2, fmt.Errorf("%w: -actor names one actor: no -tenant, -class or -all with it", errUsage)
		}
		id, err := parseActor(*actor)
		if err != nil {
			return 2, err
		}
		*tenant, sel.Class, sel.Name = id.Tenant, id.Class, id.Name
		if fs.NArg() > 0 {
			return 2, fmt.Errorf("%w: %q is not a flag", errUsage, fs.Arg(0))
		}
	default:
		if err := needTenant(fs, *tenant); err != nil {
			return 2, err
		}
		if *all == (*class != "") {
			return 2, fmt.Errorf("%w: say which: -actor TENANT/CLASS/NAME, -tenant T -class C, or -tenant T -all", errUsage)
		}
	}
	call := nc.RedriveDeadLetters
	if verb == "ack" {
		call = nc.AcknowledgeDeadLetters
	}
	var done, failed int
	for {
		out, err := call(ctx, *tenant, sel)
		if err != nil {
			return 2, fmt.Errorf("tenant %s: %w", *tenant, err)
		}
		done, failed = done+out.Done, failed+out.Failed
		if *asJSON {
			if err := writeJSON(stdout, out); err != nil {
				return 2, err
			}
		} else {
			for _, r := range out.Actors {
				id := abi.ActorID{Tenant: r.Tenant, Class: r.Class, Name: r.Name}
				switch {
				case r.Detail != "":
					fmt.Fprintf(stdout, "FAILED %s: %s\n", id, r.Detail)
				case r.AlarmMs != nil:
					fmt.Fprintf(stdout, "%s %s: alarm at %s, retry count 0\n", r.Result, id, formatMs(*r.AlarmMs))
				default:
					fmt.Fprintf(stdout, "%s %s\n", r.Result, id)
				}
			}
		}
		// A dry run reports one call's worth; a call that did nothing
		// would be answered the same again.
		if !out.More || sel.DryRun || out.Done == 0 {
			break
		}
	}
	if !*asJSON {
		what := map[string]string{"redrive": "redriven", "ack": "acknowledged"}[verb]
		if *dryRun {
			fmt.Fprintf(stdout, "dry run: %d dead letters would be %s; nothing changed\n", done, what)
		} else {
			fmt.Fprintf(stdout, "%d dead letters %s, %d failed\n", done, what, failed)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "keepctl dead-letters %s: %d actors failed\n", verb, failed)
		return 1, nil
	}
	return 0, nil
}

// alarmsListNode is alarms list through a node (-node without -bucket):
// the tenant's index entries, without S3 credentials.
func alarmsListNode(ctx context.Context, nc *client.Client, args []string, stdout, stderr io.Writer) (int, error) {
	fs := subFlags("alarms list", stderr)
	parse := filterFlags(fs, "due-after", "due-before", "entries due")
	asJSON := jsonFlag(fs, "one JSON array")
	f, err := parse(args, stdout)
	if err != nil {
		return 2, err
	}
	if f.Tenant == "" {
		return 2, fmt.Errorf("%w: through a node (-node without -bucket), -tenant T is required", errUsage)
	}
	entries := []client.AlarmEntry{}
	for o := (client.ListOptions{Class: f.Class, DueAfterMs: f.DueAfter, DueBeforeMs: f.DueBefore, Limit: 1000}); ; {
		page, err := nc.Alarms(ctx, f.Tenant, o)
		if err != nil {
			return 2, fmt.Errorf("tenant %s: %w", f.Tenant, err)
		}
		entries = append(entries, page.Alarms...)
		if o.Cursor = page.NextCursor; o.Cursor == "" {
			break
		}
	}
	if *asJSON {
		return 0, writeJSON(stdout, entries)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DUE\tACTOR")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\n", formatMs(e.DueMs), abi.ActorID{Tenant: e.Tenant, Class: e.Class, Name: e.Name})
	}
	if err := tw.Flush(); err != nil {
		return 2, err
	}
	fmt.Fprintf(stdout, "%d entries\n", len(entries))
	return 0, nil
}
