package main

// Every flag of every command is also read from the environment and from a
// config file, for Kubernetes and the like, where flags are awkward and
// secrets come as variables or mounted files. The flags stay the one
// description of the configuration: a variable or a key exists because a
// flag does, so a flag that a command gains gets both without more code.
//
// This is a thin layer over package flag rather than a library such as
// peterbourgon/ff: ff/v4 exists only as pre-releases on the Go proxy, and
// its YAML parser decodes into a map, which loses the line of a key that
// is refused; claimd names the file and the line of every config error, as
// it does for a providers file.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/yamlconf"
)

// envPrefix begins the environment variable of every flag.
const envPrefix = "CLAIMD_"

// envName is the environment variable that sets the flag called name:
// CLAIMD_ and the name in capitals, dashes as underscores (--postgres-url
// is CLAIMD_POSTGRES_URL).
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// configFlag names the config file; it is every command's flag but version's.
const configFlag = "config"

// precedence is the rule, as help and docs/operating.md state it.
const precedence = "the command line wins over the environment, which wins over the config file, which wins over the default"

// newFlagSet returns the flag set of a command ("serve", "token new"),
// with --config. Package flag prints nothing: parse reports errors and
// help requests as errors, and realMain prints them.
func newFlagSet(name string) *flag.FlagSet {
	fs := bareFlagSet(name)
	fs.String(configFlag, "", "YAML `FILE` of flag values, one key per flag, named as the flag without its dashes (listen: 0.0.0.0:50051); "+
		"unknown keys are refused with their line; a key of another command's flag is left to that command")
	return fs
}

// bareFlagSet is newFlagSet without --config, for a command without flags.
func bareFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("claimd "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// helpRequested is what parse returns for -h or --help: realMain prints the
// command's help on stdout and exits 0.
type helpRequested struct{ fs *flag.FlagSet }

func (h *helpRequested) Error() string { return "help requested" }

// parse sets the flags of fs from the command line args, then each flag the
// command line left unset from its environment variable (an empty one
// counts as unset), then each flag still unset from the --config file.
// Arguments other than flags are refused.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpRequested{fs}
		}
		return fmt.Errorf("%w: %s: %v (%s --help lists its flags)", errUsage, fs.Name(), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected arguments %q (%s --help lists its flags)", errUsage, fs.Name(), fs.Args(), fs.Name())
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%s: not a value of --%s: %s", envName(f.Name), textclip.Quote(v, maxEcho), f.Name, want(f, err)))
			return
		}
		set[f.Name] = true
	})
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	if f := fs.Lookup(configFlag); f != nil && f.Value.String() != "" {
		return applyConfig(fs, f.Value.String(), set)
	}
	return nil
}

// applyConfig sets the flags of fs that are not in set from the config file
// at path: a YAML mapping of flag names to single values, read as strictly
// as the providers and auth files (internal/yamlconf). A key that is a flag
// of no command is refused, naming the file and its line; a key that is
// another command's flag is skipped, so that one file serves serve,
// migrate and prune alike. An empty file sets nothing.
func applyConfig(fs *flag.FlagSet, path string, set map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: --config: %v", errUsage, err)
	}
	l := yamlconf.Loader{File: path}
	root, empty := l.Document(data, "a config file")
	switch {
	case empty:
		return nil
	case root == nil:
		return fmt.Errorf("%w: %w", errUsage, l.Err())
	case root.Kind != yaml.MappingNode:
		l.Errorf(root, "", "want a mapping of flag names to values, as in listen: 127.0.0.1:50051")
		return fmt.Errorf("%w: %w", errUsage, l.Err())
	}
	known := knownFlags()
	for _, f := range l.Fields(root, "", nil) {
		k, v := f.Key, f.Value
		name := k.Value
		switch {
		case name == configFlag:
			l.Errorf(k, "", "config cannot name another config file")
			continue
		case fs.Lookup(name) == nil && !known[name]:
			l.Errorf(k, "", "unknown key %s: no claimd command has such a flag%s", textclip.Quote(name, maxEcho), suggest(name, known))
			continue
		case v.Kind != yaml.ScalarNode || v.Tag == "!!null":
			l.Errorf(v, "", "%s must be a single value (remove the key to keep the default)", name)
			continue
		}
		if fs.Lookup(name) == nil || set[name] {
			continue // another command's flag, or set by the command line or the environment
		}
		if err := fs.Set(name, v.Value); err != nil {
			l.Errorf(v, "", "%s: %s is not a value of --%s: %s", name, textclip.Quote(v.Value, maxEcho), name, want(fs.Lookup(name), err))
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return nil
}

// want says what f takes, in place of package flag's "parse error".
func want(f *flag.Flag, err error) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 90s, 15m or 72h"
	case bool:
		return "want true or false"
	case int, int64, uint, uint64:
		return "want an integer"
	}
	return err.Error()
}

// knownFlags are the flags of every command: the keys a config file may
// hold.
func knownFlags() map[string]bool {
	known := make(map[string]bool)
	for _, c := range commands() {
		if c.flags == nil {
			continue
		}
		fs := newFlagSet(c.name)
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	}
	return known
}

// suggest names the flag that a key probably meant: written with
// underscores (as its variable is) or with its dashes.
func suggest(key string, known map[string]bool) string {
	for _, alt := range []string{strings.ReplaceAll(key, "_", "-"), strings.TrimLeft(key, "-")} {
		if alt != key && known[alt] {
			return fmt.Sprintf(" (did you mean %s?)", alt)
		}
	}
	return ""
}

// maxEcho bounds how much of a refused value an error repeats.
const maxEcho = 64

// help is the help of the command whose flag set is fs: its usage, what it
// does, and each flag with its variable and default.
func help(fs *flag.FlagSet) string {
	var b strings.Builder
	name := strings.TrimPrefix(fs.Name(), "claimd ")
	summary := ""
	for _, c := range commands() {
		if c.name == name {
			summary = c.summary
		}
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		fmt.Fprintf(&b, "Usage: %s\n\n%s.\n", fs.Name(), capitalize(summary))
		return b.String()
	}
	fmt.Fprintf(&b, "Usage: %s [flags]\n\n%s.\n\n", fs.Name(), capitalize(summary))
	fmt.Fprintf(&b, "Flags. Each can also be set by the environment variable shown, or by a key of the --config file; %s.\n", precedence)
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if kind != "" {
			head += " " + kind
		}
		fmt.Fprintf(&b, "\n%-34s %s\n      %s", head, envName(f.Name), usage)
		switch def := f.DefValue; {
		case def == "" || def == "0" || def == "0s" || def == "false":
		case kind == "string":
			fmt.Fprintf(&b, " (default %q)", def)
		default:
			fmt.Fprintf(&b, " (default %s)", def)
		}
		b.WriteString("\n")
	})
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
