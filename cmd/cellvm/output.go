package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/cell"
)

// streamed says which of a cell's outputs were already printed as events.
type streamed struct{ stdout, stderr bool }

// printResult prints a cell result for a person: stdout and stderr (unless
// they were streamed already), the main result and other displays, the
// error with its traceback, and where the images were saved.
func printResult(r cell.Result, stdout, stderr io.Writer, outDir string, seen streamed) {
	if !seen.stdout {
		io.WriteString(stdout, r.Stdout)
	}
	if !seen.stderr {
		if r.Stderr != "" {
			io.WriteString(stderr, r.Stderr)
			if !strings.HasSuffix(r.Stderr, "\n") {
				fmt.Fprintln(stderr)
			}
		}
	}
	if r.Truncated.StdoutBytes > 0 || r.Truncated.StderrBytes > 0 {
		fmt.Fprintf(stderr, "[output cut: %d bytes of stdout, %d bytes of stderr]\n", r.Truncated.StdoutBytes, r.Truncated.StderrBytes)
	}
	for i, d := range r.Results {
		saved := false
		for _, mime := range []string{"image/png", "image/svg+xml"} {
			data, ok := d.Data[mime]
			if !ok {
				continue
			}
			ext := map[string]string{"image/png": "png", "image/svg+xml": "svg"}[mime]
			name := filepath.Join(outDir, fmt.Sprintf("cellvm-%d-%d.%s", r.ExecutionCount, i, ext))
			b := []byte(data)
			if mime == "image/png" {
				var err error
				if b, err = base64.StdEncoding.DecodeString(data); err != nil {
					fmt.Fprintf(stderr, "cellvm: result %d: bad base64 PNG: %v\n", i, err)
					continue
				}
			}
			if err := os.WriteFile(name, b, 0o644); err != nil {
				fmt.Fprintf(stderr, "cellvm: save %s: %v\n", name, err)
				continue
			}
			fmt.Fprintf(stdout, "[%s saved to %s]\n", mime, name)
			saved = true
		}
		if text, ok := d.Data["text/plain"]; ok && (d.Main || !saved) {
			fmt.Fprintln(stdout, text)
		}
	}
	if r.Error != nil {
		for _, line := range r.Error.Traceback {
			fmt.Fprintln(stderr, strings.TrimRight(line, "\n"))
		}
		if len(r.Error.Traceback) == 0 {
			fmt.Fprintf(stderr, "%s: %s\n", r.Error.Name, r.Error.Value)
		}
	}
	if note := lossNote(r); note != "" {
		fmt.Fprintln(stderr, note)
	}
	if note := checkpointNote(r.Checkpoint, r.CheckpointError); note != "" {
		fmt.Fprintln(stderr, note)
	}
}

// checkpointNote is the line on stderr after a cell or exec of a sandbox
// with every-cell checkpoints: the checkpoint recorded, or why none was
// (the sandbox runs on either way).
func checkpointNote(n int, failed string) string {
	switch {
	case failed != "":
		return "cellvm: no checkpoint was recorded after this cell: " + failed
	case n > 0:
		return fmt.Sprintf("[checkpoint %d]", n)
	}
	return ""
}

// lossNote is the line printResult ends with when the cell did not simply
// finish: whether the variables survived comes from StateKept and
// KilledBy, not from Status alone (a timeout whose interpreter had to be
// killed is a timeout too).
func lossNote(r cell.Result) string {
	switch r.Survival() {
	case cell.Kept:
		return ""
	case cell.KeptAfterTimeout:
		return "cellvm: the cell timed out and was interrupted; variables were kept"
	case cell.GoneTimeout:
		return "cellvm: the cell timed out and had to be killed; the interpreter restarted and variables are gone"
	case cell.GoneOOM:
		return "cellvm: the cell ran out of memory and was killed; the interpreter restarted and variables are gone"
	case cell.GoneLost:
		return "cellvm: the interpreter was lost; variables are gone"
	}
	return "cellvm: the cell ran in a fresh interpreter; variables from earlier cells are gone"
}

func printJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// printJSONLine prints v as one line (NDJSON).
func printJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
