package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/wasmkeep/alarms/node"
)

// command is one of keepctl's commands, for its usage.
type command struct {
	name, args, help string
	// bucket: it reads the bucket (-bucket); node: it calls a node (-node).
	bucket, node bool
}

// commands are keepctl's commands, in the order of its usage.
var commands = []command{
	{name: "alarms list", bucket: true, args: "[-tenant T] [-class C] [-due-after TIME] [-due-before TIME] [-o json]",
		help: "the index entries, by tenant and due time (TIME: RFC 3339 or Unix ms);\nwith -node and no -bucket, the tenant's (-tenant required) through the\nnode, without S3 credentials"},
	{name: "alarms failed", bucket: true, args: "[-tenant T] [-class C] [-after TIME] [-before TIME] [-o json]",
		help: "the alarms whose retries were given up after their class's last\nattempt (keepnode -max-attempts): each actor's dead letter, from its\nlatest state in the bucket (one GET per actor)"},
	{name: "alarms export", bucket: true, args: "[-tenant T] [-class C] [-due-after TIME] [-due-before TIME]",
		help: "one JSON line per actor with a committed alarm the filter keeps\n(its latest state in the bucket): tenant, class, name (name_hex for a\nname that is not UTF-8), alarm_ms, alarm, retry_count"},
	{name: "actor inspect", bucket: true, args: "TENANT/CLASS/NAME [-o json]",
		help: "the actor's committed alarm, retry count, alarm_indexed, fence, dead letter,\ngeneration and hold, read from the bucket (no hold taken, nothing written)"},
	{name: "nodes", bucket: true, args: "[-o json]",
		help: "the node leases in the bucket: each node's address, build (version\nand commit; - where its lease names none), classes, last renewal and\nwhether its lease is live by the time it wrote"},
	{name: "cluster version", bucket: true, args: "[-o json]",
		help: "the cluster version the cluster was finalized at (0: never), the newest\nthis keepctl supports, and each live node's: the newest its build\nsupports, as its lease names it (0: a build from before cluster versions)"},
	{name: "cluster finalize", bucket: true, args: "[-to N] [-o json]",
		help: "finalizes the cluster at cluster version N (default: the newest this\nkeepctl supports) once every live node's lease names N or later: from\nthen on a node of a build that supports less refuses to start, and\nfeatures gated on N may write what earlier builds cannot read; exits 1,\nnaming each node behind, if a live node does not support N, and\nrefuses a version lower than the cluster's (no going back)"},
	{name: "verify", bucket: true, args: "[-serves CLASS,...] [-parallel N] [-o json]",
		help: "the index doctor: every committed alarm has an entry at its time;\nexplains the extra entries; reports keys that are both an object\nand the folder of others (a store such as MinIO accepts them but\nhides the keys under them from listings); exits 1 if an alarm has\nno entry or such a key exists"},
	{name: "backfill", bucket: true, args: "[-o json]",
		help: "lists an entry for every committed alarm that has none; deletes nothing"},
	{name: "alarm get", node: true, args: "TENANT/CLASS/NAME [-o json]",
		help: "the actor's committed alarm and retry count, and its dead letter if it\nhas one, through the node (no S3 credentials); the guest is not called"},
	{name: "alarm set", node: true, args: "TENANT/CLASS/NAME TIME [-o json]",
		help: "sets the alarm at TIME (RFC 3339, Unix ms, or +DURATION from now);\nthe retry count goes back to 0; the guest is not called"},
	{name: "alarm clear", node: true, args: "TENANT/CLASS/NAME [-o json]",
		help: "clears the alarm; the guest is not called"},
	{name: "alarm fire", node: true, args: "TENANT/CLASS/NAME [-o json]",
		help: "runs on-alarm now (exit 1 if it failed: its retry is committed)"},
	{name: "alarms delete", bucket: true, node: true, args: "[-tenant T] [-class C] [-due-after TIME] [-due-before TIME] [-dry-run] [-o json]",
		help: "(with -bucket too) clears the alarm of every actor whose index entry\nand committed alarm the filter keeps; -dry-run prints what it would\nclear and changes nothing"},
	{name: "dead-letters list", node: true, args: "-tenant T [-class C] [-o json]",
		help: "the tenant's dead letters: each actor whose alarm's retries were given up\nand that was not redriven, acknowledged or had its alarm set again since"},
	{name: "dead-letters redrive", node: true, args: "-actor TENANT/CLASS/NAME | -tenant T (-class C | -all) [-dry-run] [-o json]",
		help: "sets each dead letter's alarm to now with its retry count at 0, by the\nactor's holder, and clears the dead letter: on-alarm runs again with the\nclass's whole attempt budget; -dry-run prints what it would redrive"},
	{name: "dead-letters ack", node: true, args: "-actor TENANT/CLASS/NAME | -tenant T (-class C | -all) [-dry-run] [-o json]",
		help: "clears the dead letters without running anything"},
	{name: "alarms import", node: true, args: "[-f FILE] [-dry-run] [-o json]",
		help: "sets, through the node, the alarm of each actor in the JSON lines of\nalarms export (FILE, or stdin): every line is checked before any is\nsent; an actor that does not exist is skipped (a request creates it);\nthe retry count starts at 0"},
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

const usageHead = `Usage: keepctl -bucket NAME [-prefix cluster/] COMMAND [flags]
       keepctl -node URL [-token-file FILE] [-ca FILE] alarm get|set|clear|fire TENANT/CLASS/NAME ...
       keepctl -version

Inspects the alarms of a wasmkeep cluster in its S3 bucket, without joining
it, and changes one alarm, or those a filter keeps, through a node's HTTP
API (-node). S3 is configured as for keepnode: AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION. The node's token
comes from -token-file or $KEEPCTL_TOKEN; -bucket, -prefix and -node may
come from $KEEPCTL_BUCKET, $KEEPCTL_PREFIX and $KEEPCTL_NODE, and else from
keepnode's configuration file (-config FILE or $KEEPCTL_CONFIG). Every
command takes -help, and -o json (or -json) for JSON output.
`

// writeUsage writes keepctl's usage, with the global flags of fs.
func writeUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, usageHead)
	fmt.Fprint(w, "\nCommands:\n")
	for _, c := range commands {
		if !c.node {
			writeCommand(w, c)
		}
	}
	fmt.Fprint(w, "\nCommands through a node (-node URL), each an event of the actor's holder,\ncommitted, indexed and replicated before it answers:\n")
	for _, c := range commands {
		if c.node {
			writeCommand(w, c)
		}
	}
	fmt.Fprint(w, "\nExit status: 0 on success; 1 when verify finds a committed alarm with no\nentry or a key that is both an object and the folder of other keys, alarm\nfire's on-alarm failed, alarms delete or import failed for an actor, or\ncluster finalize refused; 2 for bad usage or a failure to reach the bucket\nor the node.\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func writeCommand(w io.Writer, c command) {
	fmt.Fprintf(w, "  %s %s\n", c.name, c.args)
	for line := range strings.Lines(c.help) {
		fmt.Fprintf(w, "        %s", line)
	}
	fmt.Fprintln(w)
}

// errHelp is returned by a command asked for -help: its usage is written
// and keepctl exits 0.
var errHelp = errors.New("help requested")

// subFlags is the flag set of the named command. Parse its arguments with
// parseArgs.
func subFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("keepctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parseArgs writes it
	return fs
}

// parseArgs parses args with a command's flags. Asked for -help, it
// writes the command's usage to stdout and returns errHelp; on a flag it
// does not know, it writes the usage to stderr (after the flag package's
// message) and returns errUsage.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeSubUsage(stdout, fs)
		return errHelp
	case err != nil:
		writeSubUsage(fs.Output(), fs)
		return errUsage
	}
	return nil
}

func writeSubUsage(w io.Writer, fs *flag.FlagSet) {
	name := strings.TrimPrefix(fs.Name(), "keepctl ")
	c, _ := lookup(name)
	global := "-bucket NAME [-prefix P]"
	switch {
	case c.node && c.bucket:
		global += " -node URL"
	case c.node:
		global = "-node URL [-token-file FILE] [-ca FILE]"
	}
	fmt.Fprintf(w, "Usage: keepctl %s %s %s\n\n", global, c.name, c.args)
	for line := range strings.Lines(c.help) {
		fmt.Fprintf(w, "  %s", line)
	}
	fmt.Fprint(w, "\n\nFlags:\n")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// jsonFlag adds -json (its output described by what) and -o text|json,
// which sets the same.
func jsonFlag(fs *flag.FlagSet, what string) *bool {
	asJSON := fs.Bool("json", false, what+" (as -o json)")
	fs.Func("o", "`format` of the output: text (the default) or json", func(v string) error {
		switch v {
		case "json":
			*asJSON = true
		case "text":
			*asJSON = false
		default:
			return fmt.Errorf("-o %q: want text or json", v)
		}
		return nil
	})
	return asJSON
}

// version is keepctl's version, from the build information the Go
// toolchain records: the module's version, or its VCS revision and time
// when it was built from a checkout.
func version() string {
	v := "keepctl"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v + " (no build information) " + runtime.Version()
	}
	mod := bi.Main.Version
	if mod == "" {
		mod = "(devel)"
	}
	v += " " + mod
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	// A build that recorded neither (an image's: its tree has no .git) is
	// stamped with -ldflags -X, as keepnode is (node.Version, node.Revision).
	if m, r := node.Stamped(mod, rev); m != mod || r != rev {
		v = "keepctl " + m
		rev, at = r, "stamped"
	}
	if rev != "" {
		v += fmt.Sprintf(" (%s, %s%s)", rev[:min(12, len(rev))], at, dirty)
	}
	return v + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
