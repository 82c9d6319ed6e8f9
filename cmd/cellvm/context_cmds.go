package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// sandboxRestartCommand is `cellvm sandbox restart SANDBOX [--language L]
// [--context NAME]`: one session gets a fresh program, the others keep
// their variables.
func (a *app) sandboxRestartCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restart SANDBOX",
		Short: "give one of a sandbox's sessions a fresh interpreter (its variables are lost; Python's default session unless --language or --context says otherwise)",
		Args:  exactArgs(1, "one SANDBOX"),
	}
	var language, name string
	addSessionFlags(cmd.Flags(), &language, &name)
	var s sandbox.Session
	return a.daemonCommandChecked(cmd, func([]string) error {
		var err error
		s, err = sessionOf(language, name)
		return err
	}, func(ctx context.Context, c *api.Client, args []string) error {
		if err := c.Restart(ctx, args[0], s); err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, map[string]string{"id": args[0], "done": "restart"})
		}
		return nil
	})
}

// contextCommand is `cellvm context ls|create|rm`: a sandbox's sessions.
// Each language has a default session, started by its first cell; named
// ones ("contexts", as E2B calls them) have their own variables and
// working directory.
func (a *app) contextCommand() *cobra.Command {
	return groupCommand("context", "list, create or remove a sandbox's sessions (contexts): each language's, and named ones with their own variables",
		a.daemonCommand(&cobra.Command{Use: "ls SANDBOX", Aliases: []string{"list"}, Short: "list a sandbox's sessions: language, name, working directory, whether its program runs", Args: exactArgs(1, "one SANDBOX")},
			func(ctx context.Context, c *api.Client, args []string) error {
				cs, err := c.Contexts(ctx, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					if cs == nil {
						cs = []sandbox.ContextInfo{}
					}
					return printJSON(a.stdout, cs)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "LANGUAGE\tCONTEXT\tCWD\tRUNNING")
				for _, ci := range cs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", ci.Language, ci.Name, ci.Cwd, ci.Running)
				}
				return tw.Flush()
			}),
		a.contextCreateCommand(),
		a.contextRmCommand(),
	)
}

func (a *app) contextCreateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create SANDBOX [NAME]",
		Short: "create a named session of a language (its program starts with its first cell); prints its name",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("want SANDBOX and an optional NAME, got %d argument(s)", len(args))
			}
			return nil
		},
	}
	var language, cwd string
	cmd.Flags().StringVar(&language, "language", "", "the session's language: "+cell.LanguageList(cell.Languages)+" (default python)")
	cmd.Flags().StringVar(&cwd, "cwd", "", "its working directory, an absolute guest path (default: the sandbox's)")
	var spec sandbox.ContextSpec
	return a.daemonCommandChecked(cmd, func(args []string) error {
		name := ""
		if len(args) == 2 {
			name = args[1]
		}
		s, err := sessionOf(language, name)
		if err != nil {
			return err
		}
		if cwd != "" && cwd[0] != '/' {
			return usagef("--cwd %q: an absolute path", clipArg(cwd))
		}
		spec = sandbox.ContextSpec{Language: s.Language, Name: s.Context, Cwd: cwd}
		if spec.Language == "" {
			spec.Language = cell.Python
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		ci, err := c.CreateContext(ctx, args[0], spec)
		if err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, ci)
		}
		fmt.Fprintln(a.stdout, ci.Name)
		return nil
	})
}

func (a *app) contextRmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm SANDBOX NAME...",
		Aliases: []string{"remove"},
		Short:   "end named sessions of a language and their programs (their variables are lost)",
		Args:    minArgs(2, "SANDBOX and at least one NAME"),
	}
	var language string
	cmd.Flags().StringVar(&language, "language", "", "the sessions' language: "+cell.LanguageList(cell.Languages)+" (default python)")
	var lang cell.Language
	return a.daemonCommandChecked(cmd, func(args []string) error {
		for _, name := range args[1:] {
			s, err := sessionOf(language, name)
			if err != nil {
				return err
			}
			lang = s.Language
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		return a.removeEach(ctx, "cellvm context rm", "name", args[1:], func(ctx context.Context, name string) error {
			return c.DeleteContext(ctx, args[0], sandbox.Session{Language: lang, Context: name})
		})
	})
}
