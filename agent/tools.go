package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/manifest"
)

// Tool names.
const (
	ToolRunPython = "run_python"
	ToolExec      = "exec"
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
	// ToolListFiles, ToolUploadFile and ToolRestartPython complete the
	// companions: a directory listing, binary files in, a fresh
	// interpreter.
	ToolListFiles     = "list_files"
	ToolUploadFile    = "upload_file"
	ToolRestartPython = "restart_python"
)

// ToolSpec describes a tool to a model: its name, what it does, and the
// JSON Schema of its arguments (always an object schema).
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"input_schema"`
}

// SandboxFacts are the facts about the sandbox that the tool descriptions
// state, so the model is told the truth about where its code runs.
type SandboxFacts struct {
	// Network lists the egress allowlist; empty means no network at all.
	Network []string
	// Timeout is the default cell timeout in seconds.
	TimeoutS int
	// Root says the sandbox was created with "root": true, so code runs
	// as root in the guest rather than as an unprivileged user.
	Root bool
	// Languages are the image's cell languages with their versions; nil
	// is the default image's (manifest.Default). run_code is offered for
	// those besides Python.
	Languages []cell.LanguageInfo
	// Checkpoints says the sandbox records a checkpoint after each cell:
	// undo_last_cell and list_checkpoints are offered (checkpoints.go).
	Checkpoints bool
}

// RunPythonDescription is the run_python tool's description. Every sentence
// is something the model can rely on.
func RunPythonDescription(f SandboxFacts) string {
	var b strings.Builder
	b.WriteString("Run Python code in a persistent interpreter inside an isolated Linux microVM. ")
	b.WriteString("State persists between calls like a Jupyter notebook: variables, imports, functions and open files stay defined for later calls, so load data once and reuse it. ")
	img := manifest.Default()
	fmt.Fprintf(&b, "Python %s with these packages installed: %s (and the standard library; pip list shows every package). ", img.Python, img.Summary())
	if len(f.Network) == 0 {
		b.WriteString("pip cannot download anything because the sandbox has no network access at all; %pip install of a wheel file under /workspace works. ")
	} else {
		b.WriteString("%pip install NAME installs more if an allowed host serves it (PyPI is pypi.org and files.pythonhosted.org), and it is importable at once. ")
		fmt.Fprintf(&b, "Network access is limited to: %s; every other destination is blocked. ", strings.Join(f.Network, ", "))
	}
	b.WriteString("Print what you need to see: you get stdout, stderr, the value of the last expression, and errors with the end of the traceback. ")
	b.WriteString("Notebook syntax works as in Jupyter: !cmd runs a shell command (x = !cmd captures its lines), and %time, %timeit, %cd, %env, %%bash and %%writefile are available. ")
	b.WriteString("Long output is cut from the middle and the number of characters cut is stated. ")
	b.WriteString("Open matplotlib figures are returned to you as images at the end of the call (no need to save them). ")
	b.WriteString("Uploaded files are under /workspace, and files you write there can be downloaded by the user. ")
	if f.Root {
		b.WriteString("Code runs as root inside the microVM, so system files and packages can be changed. ")
	} else {
		b.WriteString("Code runs as an unprivileged user: it can write /workspace, /tmp and its home directory but not system files, and its processes and memory are limited. ")
	}
	if f.TimeoutS > 0 {
		fmt.Fprintf(&b, "Each call may run for at most %d seconds unless timeout_s says otherwise; ", f.TimeoutS)
	}
	b.WriteString("a call that runs too long is interrupted, and the result says whether variables survived.")
	return b.String()
}

// Specs returns the tools offered to a model: run_python, and the
// companions when withCompanions is set (run_code first among them, when
// the image has languages besides Python).
func Specs(f SandboxFacts, withCompanions bool) []ToolSpec {
	specs := []ToolSpec{{
		Name:        ToolRunPython,
		Description: RunPythonDescription(f),
		Schema: json.RawMessage(`{"type":"object","properties":{` +
			`"code":{"type":"string","description":"Python source to run, as in a notebook cell. The value of the last expression is shown."},` +
			`"timeout_s":{"type":"integer","minimum":1,"maximum":3600,"description":"Time limit for this call in seconds (optional)."}` +
			`},"required":["code"],"additionalProperties":false}`),
	}}
	if f.Checkpoints {
		specs = append(specs, checkpointSpecs()...)
	}
	if !withCompanions {
		return specs
	}
	if rc, ok := runCodeSpec(f); ok {
		specs = append(specs, rc)
	}
	return append(specs,
		ToolSpec{
			Name:        ToolExec,
			Description: "Run one program in the sandbox, outside the Python interpreter, with an argument vector (no shell unless you run one, e.g. [\"sh\", \"-c\", \"ls -l /workspace\"]). Returns the exit code, stdout and stderr.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"argv":{"type":"array","items":{"type":"string"},"minItems":1,"description":"Program and arguments."},` +
				`"stdin":{"type":"string","description":"Text fed to the program's standard input (optional)."},` +
				`"timeout_s":{"type":"integer","minimum":1,"maximum":3600,"description":"Time limit in seconds (optional)."}` +
				`},"required":["argv"],"additionalProperties":false}`),
		},
		ToolSpec{
			Name:        ToolReadFile,
			Description: "Read a text file from the sandbox (an absolute path, e.g. /workspace/data.csv). Long files are cut from the middle with the number of characters cut stated.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"Absolute path in the sandbox."}` +
				`},"required":["path"],"additionalProperties":false}`),
		},
		ToolSpec{
			Name:        ToolWriteFile,
			Description: "Write a text file in the sandbox, creating parent directories and replacing any existing file. Use /workspace for files the user should get.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"Absolute path in the sandbox."},` +
				`"content":{"type":"string","description":"The file's full text."}` +
				`},"required":["path","content"],"additionalProperties":false}`),
		},
		ToolSpec{
			Name:        ToolListFiles,
			Description: "List a directory in the sandbox (default /workspace): names, sizes, kinds and modification times.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"Absolute directory path in the sandbox (default /workspace)."}` +
				`},"additionalProperties":false}`),
		},
		ToolSpec{
			Name:        ToolUploadFile,
			Description: "Put a file of any content (binary too) into the sandbox, given as base64, creating parent directories and replacing any existing file.",
			Schema: json.RawMessage(`{"type":"object","properties":{` +
				`"path":{"type":"string","description":"Absolute path in the sandbox."},` +
				`"content_base64":{"type":"string","description":"The file's bytes, base64-encoded (standard alphabet, padded)."}` +
				`},"required":["path","content_base64"],"additionalProperties":false}`),
		},
		ToolSpec{
			Name:        ToolRestartPython,
			Description: "Replace the Python interpreter with a fresh one: every variable, import and open file of earlier run_python calls is gone; files on disk stay.",
			Schema:      json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		},
	)
}
