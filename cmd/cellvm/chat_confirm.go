package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/sandbox"
)

// confirmer is `cellvm chat --confirm`: before each cell or command runs,
// it asks at the terminal: y runs it, n refuses (the model is told), e
// edits it first.
//
// Editing: with $VISUAL or $EDITOR set and stdin a terminal, the code is
// opened in that editor (run through sh, as git does, so "code -w"
// works) and what is saved runs. Otherwise, as under a script or a test
// typing into a pty, the replacement is read from stdin up to a line
// holding a single ".". Either way the edited code is shown and asked
// about again.
//
// Answers are read one line at a time and only while a question is
// asked, so an editor started in between gets the terminal to itself.
// When stdin ends, the chat is cancelled: nobody is left to answer.
type confirmer struct {
	in      *bufio.Reader
	out     io.Writer
	editor  string
	cancel  func()
	lines   chan readResult
	pending bool
}

type readResult struct {
	line string
	err  error
}

// maxAnswerBytes bounds one line read from stdin (a replacement line of
// code included).
const maxAnswerBytes = sandbox.MaxCodeBytes

func newConfirmer(stdin io.Reader, out io.Writer, getenv func(string) string, cancel func()) *confirmer {
	c := &confirmer{in: bufio.NewReader(stdin), out: out, cancel: cancel, lines: make(chan readResult, 1)}
	if f, ok := stdin.(*os.File); ok && isTerminal(f) {
		c.editor = getenv("VISUAL")
		if c.editor == "" {
			c.editor = getenv("EDITOR")
		}
	}
	return c
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// approve is the agent.Approve of the chat.
func (c *confirmer) approve(ctx context.Context, tool, code string) (string, bool, error) {
	what := "cell"
	if tool == agent.ToolExec {
		what = "command"
	}
	for {
		fmt.Fprintf(c.out, "?? run this %s? [y]es, [n]o (the model is told), [e]dit: ", what)
		line, err := c.readLine(ctx)
		if err != nil {
			fmt.Fprintln(c.out)
			c.cancel()
			return "", false, fmt.Errorf("no answer from the user (%v); the chat ends", err)
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return code, true, nil
		case "n", "no":
			fmt.Fprintf(c.out, "   refused: the model is told the %s did not run\n", what)
			return "", false, nil
		case "e", "edit":
			edited, err := c.edit(ctx, tool, code)
			if err != nil {
				if ctx.Err() != nil {
					return "", false, ctx.Err()
				}
				fmt.Fprintf(c.out, "cellvm: edit: %v\n", err)
				continue
			}
			code = edited
			fmt.Fprintf(c.out, "   the %s is now:\n%s\n", what, indentLines(code, "   "))
		default:
			fmt.Fprintln(c.out, "   answer y, n or e")
		}
	}
}

// readLine reads one line, giving up when ctx ends (Ctrl-C). The read
// itself goes on in the background; its line is taken by the next call.
func (c *confirmer) readLine(ctx context.Context) (string, error) {
	if !c.pending {
		c.pending = true
		go func() {
			line, err := readBounded(c.in, maxAnswerBytes)
			c.lines <- readResult{line, err}
		}()
	}
	select {
	case r := <-c.lines:
		c.pending = false
		return r.line, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// readBounded reads a line of at most max bytes (without its newline).
func readBounded(r *bufio.Reader, max int) (string, error) {
	var b strings.Builder
	for {
		frag, err := r.ReadSlice('\n')
		b.Write(frag)
		if b.Len() > max+1 {
			return "", fmt.Errorf("a line longer than %d bytes", max)
		}
		switch {
		case err == nil:
			return strings.TrimSuffix(strings.TrimSuffix(b.String(), "\n"), "\r"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && b.Len() > 0:
			return b.String(), nil
		default:
			return "", err
		}
	}
}

// edit returns the user's replacement for code.
func (c *confirmer) edit(ctx context.Context, tool, code string) (string, error) {
	if c.editor != "" {
		return c.editInEditor(ctx, tool, code)
	}
	fmt.Fprintln(c.out, "   type the replacement, then a line with a single \".\":")
	if tool == agent.ToolExec {
		fmt.Fprintln(c.out, "   (the command as a JSON array, e.g. [\"ls\", \"-l\"])")
	}
	var b strings.Builder
	for {
		line, err := c.readLine(ctx)
		if err != nil {
			return "", err
		}
		if line == "." {
			return strings.TrimSuffix(b.String(), "\n"), nil
		}
		if b.Len()+len(line) > sandbox.MaxCodeBytes {
			return "", fmt.Errorf("the replacement is longer than %d bytes", sandbox.MaxCodeBytes)
		}
		b.WriteString(line + "\n")
	}
}

func (c *confirmer) editInEditor(ctx context.Context, tool, code string) (string, error) {
	dir, err := os.MkdirTemp("", "cellvm-edit")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	name := "cell.py"
	if tool == agent.ToolExec {
		name = "command.json"
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(code+"\n"), 0o600); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.editor+` "$1"`, "editor", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("the editor (%s) failed: %w; the %s is unchanged", c.editor, err, name)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Size() > sandbox.MaxCodeBytes {
		return "", fmt.Errorf("the edited file is %d bytes, at most %d", fi.Size(), sandbox.MaxCodeBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

func indentLines(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}
