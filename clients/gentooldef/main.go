// Command gentooldef writes the run_python tool definition that the Python
// and JavaScript clients read, from package agent (run by go generate in
// clients/, so paths are relative to it).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cellvm/cellvm/clients"
)

func main() {
	b, err := clients.ToolDefinition()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gentooldef:", err)
		os.Exit(1)
	}
	for _, f := range clients.ToolDefinitionFiles() {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gentooldef:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gentooldef:", err)
			os.Exit(1)
		}
	}
}
