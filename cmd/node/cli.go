package main

// The floe binary's subcommands: `floe COMMAND [arguments]`. Each file
// registers its commands in commands from an init function. The admin
// commands (status, members, leader, purge) talk to any node's operator API
// over HTTP; see cli_client.go, cli_cluster.go and cli_purge.go.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// command is one subcommand of the floe binary: floe NAME [args]. run
// returns the process exit code.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// commands holds the subcommands by name.
var commands = map[string]command{}

// Exit codes of the admin commands, listed by floe help.
const (
	exitOK           = 0   // done
	exitFailed       = 1   // the operation failed: the server said no, or the purge job FAILED
	exitUsage        = 2   // bad arguments or flags, or a request the server found malformed (400)
	exitUnavailable  = 3   // the node could not be reached or stayed unavailable (503) through the retries, or --timeout passed
	exitUnauthorized = 4   // 401 or 403: no token, a wrong one, or one without the admin privilege
	exitInterrupted  = 130 // Ctrl-C or SIGTERM
)

// runCommand runs the subcommand that args[0] names and reports true. It
// reports false, running nothing, when args is empty or does not start
// with a subcommand's name (a flag, say): the caller then runs a node.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return 0, false
	}
	return cmd.run(ctx, args[1:], stdout, stderr), true
}

// commandNames lists the commands, sorted, for messages.
func commandNames() string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func init() {
	commands["help"] = command{summary: "this help, or a command's: floe help purge wait", run: runHelp}
	commands["status"] = command{summary: "the leader, term, indexes, and every member with its health", run: runStatusCommand}
	commands["members"] = command{summary: "list, add or remove cluster members", run: runMembersCommand}
	commands["leader"] = command{summary: "hand leadership to another voter", run: runLeaderCommand}
	commands["purge"] = command{summary: "list, show, retry, release and wait for purge jobs", run: runPurgeCommand}
}

// cliLeaves returns the leaves of an admin command, for floe help; nil for
// other commands.
func cliLeaves(name string) []cliLeaf {
	switch name {
	case "status":
		return statusLeaves()
	case "members":
		return memberLeaves()
	case "leader":
		return leaderLeaves()
	case "purge":
		return purgeLeaves()
	}
	return nil
}

// runHelp prints the overview, or a command's help: floe help [COMMAND
// [SUBCOMMAND]].
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelpArg(args[0]) || args[0] == "help" {
		printOverview(stdout)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "floe help: unknown command %q\nRun 'floe help' for the commands.\n", args[0])
		return exitUsage
	}
	return cmd.run(ctx, append(slices.Clone(args[1:]), "--help"), stdout, stderr)
}

func printOverview(w io.Writer) {
	fmt.Fprint(w, `Usage:
  floe [flags]                run a node; 'floe --help' lists its flags
  floe COMMAND [arguments]    run a command

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		leaves := cliLeaves(name)
		if len(leaves) == 0 {
			fmt.Fprintf(tw, "  %s\t%s\n", name, commands[name].summary)
			continue
		}
		for _, l := range leaves {
			fmt.Fprintf(tw, "  %s\t%s\n", l.use(), l.summary)
		}
	}
	_ = tw.Flush()
	fmt.Fprint(w, `
status, members, leader and purge talk to any node's operator API over HTTP
(/management/v1). Their common flags, before or after the arguments:
`)
	var o cliOptions
	fs := flag.NewFlagSet("floe", flag.ContinueOnError)
	o.register(fs, defaultCLITimeout)
	printFlags(w, fs)
	fmt.Fprint(w, `
Changes (members add-voter, add-nonvoter and remove, leader transfer, purge
retry and release) are sent with a fresh Idempotency-Key and, when the node
cannot be reached or answers 503, sent again with the same key: a change
takes effect once however many times it is sent.

Exit codes:
  0    done
  1    the operation failed: the server refused it (404, 409, 422, 5xx),
       or the purge job waited for FAILED
  2    usage error: bad arguments or flags, or the server found the
       request malformed (400)
  3    the node could not be reached, or stayed unavailable (503) through
       the retries, or --timeout passed first
  4    not authorized: no token, a wrong one, or one without the admin
       privilege (401, 403)
  130  interrupted

Errors print the server's message on stderr. Run 'floe help COMMAND' or
'floe COMMAND --help' for a command's arguments and flags.
`)
}

// defaultCLITimeout is the default --timeout of the admin commands but
// purge wait.
const defaultCLITimeout = 30 * time.Second

// defaultNodeURL is the default --node.
const defaultNodeURL = "http://127.0.0.1:8181"

// cliOptions are the admin commands' common flags.
type cliOptions struct {
	node    string
	token   string
	ca      string
	json    bool
	timeout time.Duration
}

func (o *cliOptions) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&o.node, "node", "", "`URL` of any node's HTTP API, http:// or https:// (env FLOE_NODE; default "+defaultNodeURL+")")
	fs.StringVar(&o.token, "token", "", "bearer `token` sent as Authorization: Bearer, needed with --auth=on (env FLOE_TOKEN; given empty, no token is sent)")
	fs.StringVar(&o.ca, "ca", "", "PEM `file` of the CA that signs the node's HTTPS certificate (default: the system's roots)")
	fs.BoolVar(&o.json, "json", false, "print the API's JSON instead of a table")
	fs.DurationVar(&o.timeout, "timeout", timeout, "give up after this long; 0: no limit")
}

// fromEnv fills what the command line (fs, parsed) left out from
// FLOE_NODE and FLOE_TOKEN, then the defaults. A flag given empty is not
// left out: --token "" sends no token, whatever FLOE_TOKEN holds, and
// --node "" names no node, a usage error.
func (o *cliOptions) fromEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["node"] && strings.TrimSpace(o.node) == "" {
		return errors.New("--node is empty: give a node's URL, or leave it out for FLOE_NODE or " + defaultNodeURL)
	}
	if o.node == "" {
		o.node = os.Getenv("FLOE_NODE")
	}
	if o.node == "" {
		o.node = defaultNodeURL
	}
	if !given["token"] {
		o.token = os.Getenv("FLOE_TOKEN")
	}
	return nil
}

// cliLeaf is one admin command: floe status, floe purge wait ID, ...
type cliLeaf struct {
	group string // the top-level command: "purge"
	name  string // the subcommand: "wait"; "" for the group's own
	args  string // its arguments for the usage line: "ID [--timeout D]"
	// summary is one line for floe help; about, more for --help.
	summary string
	about   string
	// minArgs and maxArgs bound the positional arguments.
	minArgs, maxArgs int
	// timeout is the default of --timeout.
	timeout time.Duration
	// flags adds the leaf's own flags; nil: only the common ones.
	flags func(fs *flag.FlagSet)
	run   func(ctx context.Context, s *cliSession, args []string) error
}

// use is the leaf's command line: "purge wait ID".
func (l cliLeaf) use() string {
	parts := []string{l.group}
	if l.name != "" {
		parts = append(parts, l.name)
	}
	if l.args != "" {
		parts = append(parts, l.args)
	}
	return strings.Join(parts, " ")
}

// title names the leaf in messages: "floe purge wait".
func (l cliLeaf) title() string {
	if l.name == "" {
		return "floe " + l.group
	}
	return "floe " + l.group + " " + l.name
}

// cliSession is what a running admin command works with.
type cliSession struct {
	opts   cliOptions
	api    *apiClient
	stdout io.Writer
	stderr io.Writer
}

// runGroup runs the leaf of group that args name: its subcommand first,
// or the group's own leaf (name "") when args start with a flag or the
// group has no subcommands.
func runGroup(ctx context.Context, group string, leaves []cliLeaf, args []string, stdout, stderr io.Writer) int {
	var own *cliLeaf
	named := 0
	for i := range leaves {
		if leaves[i].name == "" {
			own = &leaves[i]
		} else {
			named++
		}
	}
	if len(args) > 0 && isHelpArg(args[0]) {
		printGroupHelp(stdout, group, leaves)
		return exitOK
	}
	// Common flags may come before the subcommand too ("floe members
	// --node URL remove ID"): moved after it, they are the leaf's.
	if named > 0 {
		if lead, rest := leadingCommonFlags(args); len(lead) > 0 && len(rest) > 0 &&
			slices.ContainsFunc(leaves, func(l cliLeaf) bool { return l.name != "" && l.name == rest[0] }) {
			// Right after it: before any "--" that ends the flags.
			args = append(append([]string{rest[0]}, lead...), rest[1:]...)
		}
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && named > 0 {
		for _, l := range leaves {
			if l.name != "" && l.name == args[0] {
				return runLeaf(ctx, l, args[1:], stdout, stderr)
			}
		}
		fmt.Fprintf(stderr, "floe %s: unknown subcommand %q\n\n", group, args[0])
		printGroupHelp(stderr, group, leaves)
		return exitUsage
	}
	if own == nil {
		fmt.Fprintf(stderr, "floe %s: a subcommand is needed\n\n", group)
		printGroupHelp(stderr, group, leaves)
		return exitUsage
	}
	return runLeaf(ctx, *own, args, stdout, stderr)
}

// leadingCommonFlags splits args into the common flags (cliOptions) it
// starts with and the rest; lead is empty when args do not start with
// common flags alone (another flag, "--", or one that does not parse).
func leadingCommonFlags(args []string) (lead, rest []string) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	(&cliOptions{}).register(fs, 0)
	if fs.Parse(args) != nil {
		return nil, args
	}
	rest = fs.Args()
	lead = args[:len(args)-len(rest)]
	if len(lead) > 0 && lead[len(lead)-1] == "--" {
		return nil, args
	}
	return lead, rest
}

func isHelpArg(s string) bool {
	return s == "-h" || s == "-help" || s == "--help"
}

func printGroupHelp(w io.Writer, group string, leaves []cliLeaf) {
	if len(leaves) == 1 {
		printLeafHelp(w, leaves[0], leafFlags(leaves[0], &cliOptions{}))
		return
	}
	fmt.Fprintln(w, "Usage:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range leaves {
		fmt.Fprintf(tw, "  floe %s [flags]\t%s\n", l.use(), l.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nCommon flags: --node, --token, --ca, --json, --timeout. Run 'floe %s SUBCOMMAND --help'\nfor a subcommand's flags, 'floe help' for the exit codes.\n", group)
}

func printLeafHelp(w io.Writer, l cliLeaf, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: floe %s [flags]\n\n%s\n", l.use(), l.summary)
	if l.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(l.about))
	}
	fmt.Fprintln(w, "\nFlags:")
	printFlags(w, fs)
	fmt.Fprintln(w, "\nRun 'floe help' for the exit codes.")
}

// printFlags lists fs's flags the way floe --help does.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if o, ok := f.Value.(*onceFlag); ok {
			plain := *f
			plain.Value = o.Value
			f = &plain // its type, as flag names it
		}
		typ, usage := flag.UnquoteUsage(f)
		if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
			typ = ""
		}
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		fmt.Fprintf(w, "  %s\n    \t%s", name, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// leafFlags returns the flag set of l, its common flags set into o.
func leafFlags(l cliLeaf, o *cliOptions) *flag.FlagSet {
	fs := flag.NewFlagSet(l.title(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs, l.timeout)
	if l.flags != nil {
		l.flags(fs)
	}
	refuseRepeatedFlags(fs)
	return fs
}

// refuseRepeatedFlags makes every flag of fs refuse a second value: flag
// keeps the last one given, and which the operator meant is unknown (purge
// list --state FAILED --state PENDING listed only PENDING jobs), as the
// operator API refuses a repeated query parameter. Call it once every flag
// is defined.
func refuseRepeatedFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) { f.Value = &onceFlag{Value: f.Value} })
}

// onceFlag is a flag.Value that takes one value.
type onceFlag struct {
	flag.Value
	set bool
}

func (o *onceFlag) Set(v string) error {
	if o.set {
		return errors.New("given more than once: give it once")
	}
	o.set = true
	return o.Value.Set(v)
}

// String is safe on the zero onceFlag, which flag's help output makes.
func (o *onceFlag) String() string {
	if o == nil || o.Value == nil {
		return ""
	}
	return o.Value.String()
}

// IsBoolFlag keeps a boolean flag taking no argument.
func (o *onceFlag) IsBoolFlag() bool {
	b, ok := o.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// runLeaf parses args for l, runs it and returns the exit code.
func runLeaf(ctx context.Context, l cliLeaf, args []string, stdout, stderr io.Writer) int {
	var o cliOptions
	fs := leafFlags(l, &o)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printLeafHelp(stdout, l, fs)
		return exitOK
	}
	if err == nil {
		switch {
		case len(pos) < l.minArgs:
			err = fmt.Errorf("missing arguments: usage: floe %s", l.use())
		case len(pos) > l.maxArgs:
			err = fmt.Errorf("unexpected argument %q", pos[l.maxArgs])
		case o.timeout < 0:
			err = fmt.Errorf("--timeout %s: want 0 (no limit) or more", o.timeout)
		}
		for i := 0; err == nil && i < len(pos); i++ {
			if strings.TrimSpace(pos[i]) == "" {
				err = fmt.Errorf("argument %d is empty: usage: floe %s", i+1, l.use())
			}
		}
	}
	var api *apiClient
	if err == nil {
		err = o.fromEnv(fs)
	}
	if err == nil {
		api, err = newAPIClient(o.node, o.token, o.ca)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", l.title(), err, l.title())
		return exitUsage
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if !o.json {
		// Tables print what nodes report (member ids, error texts):
		// a control character there must not reach the terminal.
		stdout = controlEscaper{stdout}
	}
	s := &cliSession{opts: o, api: api, stdout: stdout, stderr: stderr}
	err = l.run(ctx, s, pos)
	if err == nil {
		return exitOK
	}
	code := cliExitCode(ctx, err)
	if code == exitInterrupted {
		// Not the error the interrupt broke off ("context canceled", or
		// a retry's last failure): a change asked for may or may not
		// have been applied.
		fmt.Fprintf(stderr, "%s: interrupted before an answer came\n", l.title())
		return code
	}
	fmt.Fprintf(stderr, "%s: %s\n", l.title(), escapeControl(err.Error()))
	return code
}

// parseInterspersed parses flags anywhere among the positional arguments,
// which it returns; after "--" everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// cliFailure is an outcome with its own exit code and message, such as a
// purge job that FAILED.
type cliFailure struct {
	code int
	msg  string
}

func (e *cliFailure) Error() string { return e.msg }

// cliExitCode maps a command's error to its exit code. ctx is the
// command's context: its end means --timeout passed, or an interrupt.
func cliExitCode(ctx context.Context, err error) int {
	if errors.Is(ctx.Err(), context.Canceled) {
		// Interrupted, whatever the error it broke off (a retry's wait
		// reports the last failure it was waiting after).
		return exitInterrupted
	}
	var f *cliFailure
	if errors.As(err, &f) {
		return f.code
	}
	if errors.Is(err, context.Canceled) {
		return exitInterrupted
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.exitCode()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return exitUnavailable
	}
	return exitFailed
}

// controlEscaper writes through to w with every ASCII control character
// but tab and newline (ESC, BEL, CR, ...) spelled as \xNN, so that text a
// node reports cannot move the cursor, retitle or clear a terminal.
type controlEscaper struct{ w io.Writer }

func (c controlEscaper) Write(p []byte) (int, error) {
	if !slices.ContainsFunc(p, isControl) {
		return c.w.Write(p)
	}
	out := make([]byte, 0, len(p)+16)
	for _, b := range p {
		if isControl(b) {
			out = append(out, fmt.Sprintf("\\x%02x", b)...)
			continue
		}
		out = append(out, b)
	}
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

func isControl(b byte) bool { return (b < 0x20 && b != '\t' && b != '\n') || b == 0x7f }

// escapeControl is s as controlEscaper writes it, for a message a node
// sent (an error text) printed outside a table.
func escapeControl(s string) string {
	var b strings.Builder
	_, _ = controlEscaper{&b}.Write([]byte(s))
	return b.String()
}
