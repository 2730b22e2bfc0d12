package main

// keepnode's settings come from three places besides the defaults: the
// command line, the environment and a TOML file. One rule names them all:
// the file's keys are the flags' names, and each flag's variable is
// KEEPNODE_ and its name in capitals with '-' as '_'. For each setting a
// flag wins over its variable, which wins over the file.

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/hashicorp/go-hclog"
)

const (
	// envPrefix starts the name of every flag's environment variable.
	envPrefix = "KEEPNODE_"
	// configFlag names the settings file.
	configFlag = "config"
)

// listFlags may be given more than once: in the environment their values
// are comma-separated, in the file a TOML array of strings (or one string).
// The per-tenant flags take lists too: one entry per tenant reads best.
var listFlags = map[string]bool{"class": true, "tenant-weight": true, "tenant-rate": true, "tenant-burst": true, "tenant-concurrency": true}

// envName is the environment variable bound to a flag: -lease-ttl is
// KEEPNODE_LEASE_TTL.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// configure sets fs from args, then each flag args left unset from its
// environment variable (getenv; an empty variable counts as unset), then
// each still unset from the TOML file -config (or $KEEPNODE_CONFIG) names.
// A key of the file that is not a flag's name is an error naming the key,
// as is a value its flag refuses, naming the key and the file.
func configure(fs *flag.FlagSet, args []string, getenv func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: keepnode takes only flags", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || f.Name == probeFlag {
			return
		}
		v, ok := getenv(envName(f.Name))
		if !ok || v == "" {
			return
		}
		set[f.Name] = true
		if f.Name == configFlag {
			errs = append(errs, fs.Set(f.Name, v))
			return
		}
		values := []string{v}
		if listFlags[f.Name] {
			values = splitList(v)
		}
		for _, one := range values {
			if err := fs.Set(f.Name, one); err != nil {
				errs = append(errs, fmt.Errorf("$%s: invalid value %q for -%s: %v", envName(f.Name), one, f.Name, err))
				return
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if file := fs.Lookup(configFlag).Value.String(); file != "" {
		if err := applyFile(fs, file, set); err != nil {
			return err
		}
	}
	if l := fs.Lookup("log-level"); l != nil && hclog.LevelFromString(l.Value.String()) == hclog.NoLevel {
		return fmt.Errorf("-log-level %q: want trace, debug, info, warn or error", l.Value)
	}
	return nil
}

// applyFile sets from the TOML file each flag not in set.
func applyFile(fs *flag.FlagSet, file string, set map[string]bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("-%s: %w", configFlag, err)
	}
	var keys map[string]any
	if _, err := toml.Decode(string(b), &keys); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	for _, key := range slices.Sorted(maps.Keys(keys)) {
		f := fs.Lookup(key)
		if f == nil || key == configFlag || key == probeFlag {
			return fmt.Errorf("%s: unknown key %q: the keys are keepnode's flag names without the '-' (keepnode -help lists them)", file, key)
		}
		values, err := tomlStrings(key, keys[key])
		if err != nil {
			return fmt.Errorf("%s: key %q: %w", file, key, err)
		}
		// Each value is checked, also those the command line or the
		// environment override, so a mistake in the file shows at once.
		check, _ := newFlags(flag.ContinueOnError)
		for _, v := range values {
			if err := check.Set(key, v); err != nil {
				return fmt.Errorf("%s: key %q: invalid value %q: %v%s", file, key, v, err, unitHint(check.Lookup(key), key, keys[key]))
			}
			if !set[key] {
				if err := fs.Set(key, v); err != nil {
					return fmt.Errorf("%s: key %q: invalid value %q: %v", file, key, v, err)
				}
			}
		}
	}
	return nil
}

// tomlStrings writes a TOML value as the flag's text: a string as it is, a
// number or a boolean as Go prints it, and for a list flag each element
// of an array.
func tomlStrings(key string, v any) ([]string, error) {
	if arr, ok := v.([]any); ok {
		if !listFlags[key] {
			return nil, fmt.Errorf("an array, but -%s takes one value", key)
		}
		var out []string
		for _, e := range arr {
			s, err := tomlScalar(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := tomlScalar(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

func tomlScalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	default:
		return "", fmt.Errorf("a %T: want a string, a number or a boolean (durations and sizes as strings, such as \"10s\" or \"512MiB\")", v)
	}
}

// unitHint says how to write a number the file gave a flag that wants a
// unit: a duration (lease-ttl = 10) as "10s".
func unitHint(f *flag.Flag, key string, v any) string {
	switch v.(type) {
	case int64, float64:
	default:
		return ""
	}
	if g, ok := f.Value.(flag.Getter); ok {
		if _, ok := g.Get().(time.Duration); ok {
			return fmt.Sprintf(` (a duration is a string with its unit: write %s = "%vs")`, key, v)
		}
	}
	return fmt.Sprintf(` (write it as a string with its unit, such as %s = "%v%s")`, key, v, "MiB")
}

// checkEnvNames refuses a KEEPNODE_ variable of environ that names no
// flag (nor a token): a misspelt one (KEEPNODE_NODEID) would otherwise be
// ignored, and the node start on the default. The error names the
// variable and the nearest one keepnode reads.
func checkEnvNames(fs *flag.FlagSet, environ []string) error {
	known := map[string]bool{envToken: true, envPeerToken: true}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = f.Name != probeFlag })
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] {
			continue
		}
		nearest, best := "", -1
		for _, k := range slices.Sorted(maps.Keys(known)) {
			if d := editDistance(name, k); best < 0 || d < best {
				nearest, best = k, d
			}
		}
		errs = append(errs, fmt.Errorf("$%s is not a variable keepnode reads (did you mean $%s? each flag's is %s and its name in capitals, '-' as '_')", name, nearest, envPrefix))
	}
	return errors.Join(errs...)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
