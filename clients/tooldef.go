package clients

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/agent"
)

// Placeholders in the generated descriptions, replaced by the clients with
// the sandbox's facts (the allowlist joined with ", ", the default timeout
// in seconds).
const (
	NetworkPlaceholder = "${network}"
	TimeoutPlaceholder = "${timeout_s}"
)

// Sentinels stand for the facts while agent renders a description; no
// real description contains them.
const (
	networkSentinel = "\x00network\x00"
	timeoutSentinel = 1234567891
)

// ToolDefinitionFiles are the generated copies of the tool definition,
// relative to this directory: one inside each client's package, so that an
// installed package carries its own.
func ToolDefinitionFiles() []string {
	return []string{"python/cellvm/run_python_tool.json", "js/src/run_python_tool.json"}
}

// toolDefinition is the generated document.
type toolDefinition struct {
	Comment     string          `json:"comment"`
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Descriptions are keyed by the facts they depend on: whether the
	// sandbox has network ("network", "no_network") and whether a default
	// timeout is stated ("", "_no_timeout").
	Descriptions map[string]string `json:"descriptions"`
	// DefaultTimeoutS is the default time limit of a call that the Go
	// toolbox states and uses.
	DefaultTimeoutS int `json:"default_timeout_s"`
	// Refused is what the model reads when an approve callback refuses a
	// cell (agent.RefusedCode).
	Refused string `json:"refused"`
}

// ToolDefinition renders the run_python tool definition from package
// agent: its name, JSON Schema and description templates.
func ToolDefinition() ([]byte, error) {
	def := toolDefinition{
		Comment:      "Generated from cellvm's Go package agent by `go generate ./clients`; do not edit.",
		Descriptions: map[string]string{},
		Refused:      agent.RefusedCode,
	}
	for _, v := range []struct {
		key  string
		fact agent.SandboxFacts
	}{
		{"no_network", agent.SandboxFacts{TimeoutS: timeoutSentinel}},
		{"network", agent.SandboxFacts{Network: []string{networkSentinel}, TimeoutS: timeoutSentinel}},
		{"no_network_no_timeout", agent.SandboxFacts{}},
		{"network_no_timeout", agent.SandboxFacts{Network: []string{networkSentinel}}},
	} {
		spec := agent.Specs(v.fact, false)[0]
		if spec.Name != agent.ToolRunPython {
			return nil, fmt.Errorf("agent.Specs' first tool is %q, not %q", spec.Name, agent.ToolRunPython)
		}
		d, err := template(spec.Description, v.fact)
		if err != nil {
			return nil, fmt.Errorf("%s description: %w", v.key, err)
		}
		def.Descriptions[v.key] = d
		def.Name, def.InputSchema = spec.Name, spec.Schema
	}
	t, err := defaultTimeout(def.Descriptions["no_network"])
	if err != nil {
		return nil, err
	}
	def.DefaultTimeoutS = t
	b, err := json.MarshalIndent(def, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// template replaces the sentinels in a rendered description with the
// placeholders, checking that each fact appears exactly where expected.
func template(d string, f agent.SandboxFacts) (string, error) {
	if strings.Contains(d, "${") {
		return "", fmt.Errorf("the description holds %q, which the clients would take for a placeholder", "${")
	}
	for _, s := range []struct {
		sentinel, placeholder string
		want                  int
	}{
		{networkSentinel, NetworkPlaceholder, len(f.Network)},
		{strconv.Itoa(timeoutSentinel), TimeoutPlaceholder, min(f.TimeoutS, 1)},
	} {
		if n := strings.Count(d, s.sentinel); n != s.want {
			return "", fmt.Errorf("%q appears %d times, want %d", s.placeholder, n, s.want)
		}
		d = strings.ReplaceAll(d, s.sentinel, s.placeholder)
	}
	return d, nil
}

// defaultTimeout reads the default timeout that the Go toolbox states out
// of its description, using the template around the placeholder.
func defaultTimeout(tmpl string) (int, error) {
	before, after, ok := strings.Cut(tmpl, TimeoutPlaceholder)
	d := (&agent.Toolbox{}).Specs()[0].Description
	if !ok || !strings.HasPrefix(d, before) || !strings.HasSuffix(d, after) {
		return 0, fmt.Errorf("the default toolbox's description does not fit the template: %q", d)
	}
	n, err := strconv.Atoi(d[len(before) : len(d)-len(after)])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("the default toolbox states no timeout: %q", d[len(before):len(d)-len(after)])
	}
	return n, nil
}
