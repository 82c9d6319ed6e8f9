// Command cellvm is the cellvm sandbox engine: the daemon, the CLI, and the
// per-VM VMM process, in one binary. The CLI is built on spf13/cobra: every
// command answers -h with its flags (exit 0), takes flags anywhere among
// its arguments, checks its arguments before it reaches a daemon, and exits
// with one of the codes in exit.go.
package main

import (
	"io"
	"os"
	"regexp"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/stwguard"
)

func main() {
	stwguard.Start()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs one cellvm command line and returns its exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runWith(args, stdin, stdout, stderr, productionDeps())
}

// app is one invocation: its streams, what the commands share, and the
// dependencies tests replace (deps).
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	deps           deps
	// jsonOut is set by a command's --json flag: errors are then JSON too.
	jsonOut bool
}

func runWith(args []string, stdin io.Reader, stdout, stderr io.Writer, d deps) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, deps: d}
	root := a.rootCommand()
	root.SetArgs(longFlagsCompat(root, args))
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err != nil && !a.jsonOut {
		a.jsonOut = jsonAsked(args)
	}
	return a.exit(cmd, err)
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "cellvm",
		Short: "cellvm runs code in KVM microVM sandboxes",
		Long: "cellvm runs code written by language models inside KVM microVMs it drives itself:\n" +
			"a persistent Python interpreter per sandbox, an egress allowlist, an HTTP API.\n\n" + exitCodesHelp,
		SilenceErrors:     true,
		SilenceUsage:      true,
		Args:              noArgs,
		RunE:              func(cmd *cobra.Command, args []string) error { return usagef("give a command (cellvm -h lists them)") },
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// cellvm --version: the same line as cellvm version.
	info, _ := debug.ReadBuildInfo()
	root.Version = versionOf(info).String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(
		a.runCommand(),
		a.serveCommand(),
		a.sandboxCommand(),
		a.snapshotCommand(),
		a.checkpointCommand(),
		a.workspaceCommand(),
		a.imageCommand(),
		a.cellCommand(),
		a.contextCommand(),
		a.execCommand(),
		a.shellCommand(),
		a.psCommand(),
		a.killCommand(),
		a.cpCommand(),
		a.lsCommand(),
		a.portForwardCommand(),
		a.networkCommand(),
		a.logsCommand(),
		a.statsCommand(),
		a.eventsCommand(),
		a.auditCommand(),
		a.doctorCommand(),
		a.chatCommand(),
		a.mcpCommand(),
		a.bootCommand(),
		a.vmmCommand(),
		a.versionCommand(),
	)
	return root
}

// longLegacy is a long flag written with one dash, as Go's flag package
// (the CLI's earlier parser) accepted: -json, -socket=PATH.
var longLegacy = regexp.MustCompile(`^-([a-z][a-z0-9-]+)(=.*)?$`)

// longFlagsCompat rewrites -name to --name where name is a long flag of
// the command the arguments run, so command lines written for the earlier
// parser keep their meaning. Arguments after "--" are left alone.
func longFlagsCompat(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args // they parse their own
	}
	out := make([]string, 0, len(args))
	for i, arg := range args {
		if arg == "--" {
			return append(out, args[i:]...)
		}
		if m := longLegacy.FindStringSubmatch(arg); m != nil && hasLongFlag(cmd, m[1]) {
			arg = "-" + arg
		}
		out = append(out, arg)
	}
	return out
}

func hasLongFlag(cmd *cobra.Command, name string) bool {
	if name == "help" {
		return true
	}
	var found bool
	cmd.Flags().VisitAll(func(f *pflag.Flag) { found = found || f.Name == name })
	cmd.InheritedFlags().VisitAll(func(f *pflag.Flag) { found = found || f.Name == name })
	return found
}

// jsonAsked says whether the arguments asked for --json, for a command
// whose flags could not be parsed.
func jsonAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}
