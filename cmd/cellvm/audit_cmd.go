package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/audit"
)

// auditCommand is `cellvm audit`: it reads the daemon's audit log from the
// file, not through the API, so it works with the daemon down and answers
// to the file's permissions (the operator's).
func (a *app) auditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "print the daemon's audit log (who created, changed or ran what, and what was refused)",
		Long: "Print the records of the audit log that serve writes (--audit-log, default STATE_DIR/audit.jsonl),\n" +
			"its rotated files first, oldest first. --json prints each record as one JSON line; -f keeps\n" +
			"printing new records as they are written, across rotation. A torn last line (a daemon killed\n" +
			"mid-write) is skipped; other lines that are not records are reported, and the exit status is 1.",
		Args: noArgs,
	}
	fs := cmd.Flags()
	var (
		file, stateDir, since string
		tenant, sandboxID     string
		follow, jsonOut       bool
	)
	fs.StringVar(&file, "file", "", "the audit log to read (default STATE_DIR/audit.jsonl)")
	fs.StringVar(&stateDir, "state-dir", "", "the daemon's state directory (default: serve's, $CELLVM_STATE_DIR or "+DefaultStateDir+")")
	fs.StringVar(&tenant, "tenant", "", "only this tenant's records")
	fs.StringVar(&sandboxID, "sandbox", "", "only this sandbox's records")
	fs.StringVar(&since, "since", "", "only records from this long ago (a duration such as 1h) or since this RFC 3339 time")
	fs.BoolVarP(&follow, "follow", "f", false, "keep printing records as they are written (Ctrl-C to stop)")
	fs.BoolVar(&jsonOut, "json", false, "print each record as one JSON line (errors too, as JSON)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		a.jsonOut = jsonOut
		f := audit.Filter{Tenant: tenant, Sandbox: sandboxID}
		if since != "" {
			t, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			f.Since = t
		}
		if file == "" {
			file = (&auditFlags{}).path(StateDir(stateDir))
		}
		out := a.auditPrinter(jsonOut)
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return a.readAudit(ctx, file, f, follow, out)
	}
	return cmd
}

// parseSince reads --since: a duration back from now, or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--since %q: want a duration such as 90m or an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
}

// readAudit prints the log's rotated files and the log, then follows it.
func (a *app) readAudit(ctx context.Context, file string, f audit.Filter, follow bool, out func(audit.Record) error) error {
	var bad []string
	files := audit.Files(file)
	if !follow {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no audit log at %s (serve writes STATE_DIR/audit.jsonl unless --audit-log says otherwise; give --file or --state-dir)", file)
		}
	} else {
		files = files[:len(files)-1] // Follow reads the current file
	}
	for _, p := range files {
		fh, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // rotated away meanwhile
		}
		if err != nil {
			return err
		}
		err = audit.Read(fh, f, out)
		fh.Close()
		var bl *audit.BadLinesError
		if errors.As(err, &bl) {
			bad = append(bad, fmt.Sprintf("%s: %v", p, bl))
		} else if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if follow {
		err := audit.Follow(ctx, file, f, out, func(err error) {
			fmt.Fprintf(a.stderr, "cellvm audit: %s: %v\n", file, err)
		})
		if err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

// auditPrinter prints a record as a JSON line, or as one line for a
// person: time, tenant, peer, action, the objects, the outcome. The
// line's control characters are shown as "?": clients chose some of the
// fields (a path, a refused route), and a terminal must not obey them.
func (a *app) auditPrinter(jsonOut bool) func(audit.Record) error {
	if jsonOut {
		return func(r audit.Record) error { return printJSONLine(a.stdout, r) }
	}
	return func(r audit.Record) error {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s %s %s", r.Time.Local().Format("2006-01-02 15:04:05.000"), orDash(r.Tenant), orDash(r.Peer), r.Action)
		for _, kv := range [][2]string{{"sandbox", r.Sandbox}, {"snapshot", r.Snapshot}, {"workspace", r.Workspace},
			{"image", r.Image}, {"path", r.Path}, {"code", shortSum(r.CodeSHA256)}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
			}
		}
		if r.Status != 0 {
			fmt.Fprintf(&b, " -> %d", r.Status)
		}
		if r.ResultStatus != "" {
			fmt.Fprintf(&b, " %s", r.ResultStatus)
		}
		if r.KilledBy != "" {
			fmt.Fprintf(&b, " killed_by=%s", r.KilledBy)
		}
		if r.Error != "" {
			fmt.Fprintf(&b, " %s: %s", r.Error, r.Reason)
		}
		if r.Policy != nil {
			fmt.Fprintf(&b, " allow %v -> %v", r.Policy.OldAllow, r.Policy.NewAllow)
		}
		if e := r.Egress; e != nil {
			fmt.Fprintf(&b, " egress allowed=%d dropped=%d dns_refused=%d", e.Allowed, e.Dropped, e.DNSRefused)
		}
		line := strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				return '?'
			}
			return r
		}, b.String())
		_, err := io.WriteString(a.stdout, line+"\n")
		return err
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortSum(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
