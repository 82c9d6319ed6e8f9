package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
)

// ToolRunCode runs a cell in a language other than Python (JavaScript,
// TypeScript, Bash): run_python stays the tool models know best, and
// run_code, offered only for the languages the image has, says which
// those are with their versions, so a model never writes a language the
// sandbox cannot run.
const ToolRunCode = "run_code"

// otherLanguages are f's languages besides Python, in cellvm's order.
func otherLanguages(f SandboxFacts) []cell.LanguageInfo {
	ls := f.Languages
	if ls == nil {
		ls = manifest.Default().Languages
	}
	var out []cell.LanguageInfo
	for _, want := range cell.Languages {
		for _, l := range ls {
			if l.Name == want && want != cell.Python {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// RunCodeDescription is run_code's description for those languages.
func RunCodeDescription(ls []cell.LanguageInfo) string {
	var names []string
	for _, l := range ls {
		n := languageTitle(l.Name)
		if l.Version != "" {
			n += " " + l.Version
		}
		names = append(names, n)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Run code in a language other than Python in the same sandbox: %s. ", strings.Join(names, ", "))
	b.WriteString("Each language has its own persistent session, separate from Python's and from the others': its variables, functions and (for Bash) working directory and exported variables stay for later calls in that language; files on disk are shared with every language. ")
	for _, l := range ls {
		switch l.Name {
		case cell.JavaScript:
			b.WriteString("JavaScript runs in Node.js like its REPL: top-level await works, the last expression's value is shown, console.log is stdout and console.error stderr, and let/const/function declarations persist. ")
		case cell.TypeScript:
			b.WriteString("TypeScript shares the JavaScript session: types are stripped before it runs and type errors do not stop it. ")
		case cell.Bash:
			b.WriteString("Bash runs in one persistent shell: a non-zero exit status is an error result with the status. ")
		}
	}
	b.WriteString("Output, errors and timeouts are reported as for run_python, and the result says whether the session's state survived.")
	return b.String()
}

func languageTitle(l cell.Language) string {
	switch l {
	case cell.JavaScript:
		return "JavaScript (Node.js)"
	case cell.TypeScript:
		return "TypeScript"
	case cell.Bash:
		return "Bash"
	}
	return string(l)
}

// runCodeSpec is run_code's spec, if the image has a language besides
// Python.
func runCodeSpec(f SandboxFacts) (ToolSpec, bool) {
	ls := otherLanguages(f)
	if len(ls) == 0 {
		return ToolSpec{}, false
	}
	enum, _ := json.Marshal(languageNames(ls))
	return ToolSpec{
		Name:        ToolRunCode,
		Description: RunCodeDescription(ls),
		Schema: json.RawMessage(`{"type":"object","properties":{` +
			`"language":{"type":"string","enum":` + string(enum) + `,"description":"The code's language."},` +
			`"code":{"type":"string","description":"Source to run, as in a notebook cell."},` +
			`"timeout_s":{"type":"integer","minimum":1,"maximum":3600,"description":"Time limit for this call in seconds (optional)."}` +
			`},"required":["language","code"],"additionalProperties":false}`),
	}, true
}

func languageNames(ls []cell.LanguageInfo) []string {
	var out []string
	for _, l := range ls {
		out = append(out, string(l.Name))
	}
	return out
}

func (t *Toolbox) runCode(ctx context.Context, args json.RawMessage) ToolResult {
	var a struct {
		Language *string `json:"language"`
		Code     *string `json:"code"`
		TimeoutS int     `json:"timeout_s"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return ToolError("%v", err)
	}
	ls := otherLanguages(SandboxFacts{Languages: t.Languages})
	if a.Language == nil || a.Code == nil {
		return ToolError(`run_code needs "language" (one of %s) and "code", a string of source`, strings.Join(languageNames(ls), ", "))
	}
	lang, err := cell.ParseLanguage(*a.Language)
	if err == nil && lang == cell.Python {
		return ToolError("use run_python for Python")
	}
	known := false
	for _, l := range ls {
		known = known || l.Name == lang
	}
	if err != nil || !known {
		return ToolError("language %q is not one this sandbox runs with run_code: %s (and Python with run_python)", clipName(*a.Language), strings.Join(languageNames(ls), ", "))
	}
	return t.runCell(ctx, ToolRunCode, sandbox.Session{Language: lang}, *a.Code, a.TimeoutS)
}
