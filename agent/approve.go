package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// Approve is a human in the loop: it is asked before each run_python,
// run_code or exec call runs, with the tool's name (ToolRunPython,
// ToolRunCode or ToolExec) and its code: the cell's source, or exec's argv
// as a JSON array of strings.
// It returns the code to run, the same or edited (an edited argv is a
// JSON array too), and ok; ok false refuses, and the model gets the
// refusal as the call's result with nothing run. An error refuses as well
// and the model is told why.
//
// It is one mechanism for every front end: `cellvm chat --confirm` asks at
// the terminal, tests answer from a script. Calls that run no code
// (read_file, list_files) and those that only write files or restart the
// interpreter are not asked about.
type Approve func(ctx context.Context, tool, code string) (approved string, ok bool, err error)

// What the model reads when the user refuses a call (the clients' approve
// callbacks give the same text: clients/tooldef.go copies RefusedCode).
const (
	RefusedCode    = "The user refused to run this code; it did not run and the sandbox is unchanged. Do not run it again as it is: ask the user what they want, or take another approach."
	RefusedCommand = "The user refused to run this command; it did not run and the sandbox is unchanged. Do not run it again as it is: ask the user what they want, or take another approach."
)

// approveCode asks t.Approve about a run_python or run_code (tool) call.
// It returns the code to run and, when the call must not run, the result
// to give instead.
func (t *Toolbox) approveCode(ctx context.Context, tool, code string) (string, bool, *ToolResult) {
	if t.Approve == nil {
		return code, false, nil
	}
	got, ok, err := t.Approve(ctx, tool, code)
	switch {
	case err != nil:
		r := ToolError("not run: asking the user for approval failed: %v", err)
		return "", false, &r
	case !ok:
		return "", false, &ToolResult{Text: RefusedCode, IsError: true}
	case len(got) > sandbox.MaxCodeBytes:
		r := ToolError("not run: the user's edited code is %d bytes, at most %d", len(got), sandbox.MaxCodeBytes)
		return "", false, &r
	}
	return got, got != code, nil
}

// approveArgv asks t.Approve about an exec call, with the argv as JSON.
func (t *Toolbox) approveArgv(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecRequest, bool, *ToolResult) {
	if t.Approve == nil {
		return req, false, nil
	}
	orig, err := json.Marshal(req.Argv)
	if err != nil {
		r := ToolError("not run: %v", err)
		return req, false, &r
	}
	got, ok, err := t.Approve(ctx, ToolExec, string(orig))
	switch {
	case err != nil:
		r := ToolError("not run: asking the user for approval failed: %v", err)
		return req, false, &r
	case !ok:
		return req, false, &ToolResult{Text: RefusedCommand, IsError: true}
	case got == string(orig):
		return req, false, nil
	}
	var argv []string
	if err := json.Unmarshal([]byte(got), &argv); err != nil {
		r := ToolError("not run: the user's edited command is not a JSON array of strings: %v", err)
		return req, false, &r
	}
	req.Argv = argv
	if err := req.Validate(); err != nil {
		r := ToolError("not run: the user's edited command: %v", err)
		return req, false, &r
	}
	return req, true, nil
}

// noteEdited tells the model that what ran is the user's edit, not its
// own code, so it reasons about what actually happened.
func (t *Toolbox) noteEdited(res ToolResult, what, code string) ToolResult {
	shown, _ := ClipMiddle(code, t.Format.withDefaults().MaxChars)
	res.Text = fmt.Sprintf("[The user edited this %s before it ran. What ran:]\n%s\n[Its result:]\n%s", what, shown, res.Text)
	return res
}
