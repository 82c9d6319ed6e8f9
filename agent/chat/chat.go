package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/convstore"
	"github.com/cellvm/cellvm/sandbox"
)

// Options configure one chat invocation.
type Options struct {
	Manager sandbox.Manager
	Model   agent.Model
	// Provider and ModelName are recorded with a conversation.
	Provider, ModelName string
	Question            string
	// Conversation, when set, names a conversation whose sandbox and
	// history are kept in Store between invocations; the sandbox is then
	// not deleted at the end. Without it the sandbox lives for this call.
	Conversation string
	Store        convstore.Store
	Config       sandbox.Config
	// Toolbox holds tool settings; Manager and SandboxID are filled in.
	Toolbox  agent.Toolbox
	MaxTurns int
	System   string
	// OutDir is where images are saved.
	OutDir         string
	Stdout, Stderr io.Writer
}

// Result is what a chat produced.
type Result struct {
	Outcome   agent.Outcome
	SandboxID string
	Images    []string
}

// Run asks the question and prints the conversation as it happens: tool
// calls and their results on Stderr, the model's text on Stdout.
func Run(ctx context.Context, o Options) (Result, error) {
	var res Result
	var conv convstore.Conversation
	var history []agent.Message
	// sbxConfig is the sandbox's config: whether it keeps checkpoints.
	var sbxConfig sandbox.Config
	question := o.Question
	if o.Conversation != "" {
		c, found, err := o.Store.Load(o.Conversation)
		if err != nil {
			return res, err
		}
		conv = c
		if found {
			history = c.Messages
		}
		if c.SandboxID != "" {
			info, err := o.Manager.Get(ctx, c.SandboxID)
			switch {
			case err == nil && info.State != sandbox.StateLost:
				res.SandboxID, sbxConfig = c.SandboxID, info.Config
			case err != nil && !errors.Is(err, sandbox.ErrNotFound):
				return res, fmt.Errorf("look up the conversation's sandbox %s: %w", c.SandboxID, err)
			default:
				fmt.Fprintf(o.Stderr, "cellvm: the conversation's sandbox %s is gone; starting a new one (earlier variables are lost)\n", c.SandboxID)
				question = "[Note from cellvm: the sandbox was replaced by a new one since your last turn; variables, imports and files from before are gone.]\n\n" + question
			}
		}
	}
	if res.SandboxID == "" {
		info, err := o.Manager.Create(ctx, o.Config)
		if err != nil {
			return res, fmt.Errorf("create sandbox: %w", err)
		}
		res.SandboxID = info.ID
		if o.Conversation == "" {
			defer o.Manager.Delete(context.WithoutCancel(ctx), info.ID)
		}
		sbxConfig = info.Config
		if err := agent.StartCheckpoint(ctx, o.Manager, info.ID, info.Config); err != nil {
			fmt.Fprintf(o.Stderr, "cellvm: %v (the first cell cannot be undone)\n", err)
		}
	}
	tb := o.Toolbox
	tb.Manager, tb.SandboxID = o.Manager, res.SandboxID
	tb.Checkpoints = agent.EveryCell(sbxConfig)
	system := o.System
	if tb.Checkpoints && system == "" {
		system = agent.DefaultSystem + " " + agent.UndoSystem
	}
	if o.Config.Network != nil {
		tb.Network = o.Config.Network.Allow
	}
	p := printer{stdout: o.Stdout, stderr: o.Stderr, outDir: o.OutDir}
	r := agent.Runner{Model: o.Model, Tools: &tb, System: system, MaxTurns: o.MaxTurns, OnEvent: p.event}
	out, err := r.Run(ctx, history, question)
	res.Outcome, res.Images = out, p.saved
	if o.Conversation != "" {
		conv.SandboxID, conv.Provider, conv.Model, conv.Messages = res.SandboxID, o.Provider, o.ModelName, out.Messages
		if serr := o.Store.Save(conv); serr != nil {
			return res, errors.Join(err, serr)
		}
	}
	return res, err
}

// printer shows the loop's events to a person.
type printer struct {
	stdout, stderr io.Writer
	outDir         string
	saved          []string
}

func (p *printer) event(e agent.Event) {
	switch e.Type {
	case agent.EventAssistantText:
		fmt.Fprintln(p.stdout, strings.TrimRight(e.Text, "\n"))
	case agent.EventToolCall:
		fmt.Fprintf(p.stderr, ">> %s [%s]\n", e.Call.Name, e.Call.ID)
		if code := callCode(e.Call); code != "" {
			fmt.Fprintln(p.stderr, indent(code, "   "))
		}
	case agent.EventToolResult:
		status := "ok"
		if e.Result.IsError {
			status = "error"
		}
		fmt.Fprintf(p.stderr, "<< %s [%s] %s\n", e.Call.Name, e.Result.CallID, status)
		text, _ := agent.ClipMiddle(e.Result.Text, 2000)
		fmt.Fprintln(p.stderr, indent(text, "   "))
		for i, img := range e.Result.Images {
			p.saveImage(e, i, img)
		}
	}
}

func (p *printer) saveImage(e agent.Event, i int, img agent.Image) {
	ext := map[string]string{"image/png": "png", "image/jpeg": "jpg"}[img.MIME]
	if ext == "" {
		ext = "bin"
	}
	name := filepath.Join(p.outDir, fmt.Sprintf("cellvm-chat-%s-%d.%s", safeName(e.Result.CallID), i+1, ext))
	if err := os.WriteFile(name, img.Data, 0o644); err != nil {
		fmt.Fprintf(p.stderr, "   [image %d: save %s: %v]\n", i+1, name, err)
		return
	}
	p.saved = append(p.saved, name)
	fmt.Fprintf(p.stderr, "   [image %d saved to %s]\n", i+1, name)
}

// callCode is the code or argv of a call, for display.
func callCode(c *agent.ToolCall) string {
	if c.ArgsError != "" {
		s, _ := agent.ClipMiddle(c.RawArgs, 2000)
		return s
	}
	var a struct {
		Code string   `json:"code"`
		Argv []string `json:"argv"`
		Path string   `json:"path"`
	}
	if json.Unmarshal(c.Args, &a) != nil {
		return string(c.Args)
	}
	switch {
	case a.Code != "":
		return a.Code
	case len(a.Argv) > 0:
		return strings.Join(a.Argv, " ")
	}
	return a.Path
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// safeName keeps a call id usable in a file name (ids come from the model).
func safeName(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteRune(c)
		}
		if b.Len() >= 48 {
			break
		}
	}
	if b.Len() == 0 {
		return "call"
	}
	return b.String()
}
