// Package modeltest is a test double of the model APIs the agent calls,
// as net/http/httptest is of a server: one HTTP handler that speaks the
// wire formats of Anthropic Messages, OpenAI Chat Completions, OpenAI
// Responses and Gemini generateContent, and plays a scripted conversation.
//
// What is real: each API's request and response shapes, its auth header
// (when APIKey is set), its error bodies and its retry headers (Fault).
// The server also checks what a real API checks and a careless client
// gets wrong: every tool call in the history has exactly one result with
// its id in the next user turn, no result answers an unknown call, and
// (Chat Completions) tool messages directly follow their assistant
// message. A request that breaks a rule gets the API's 400 error and is
// recorded in Violations, so a test sees the mistake rather than a
// scripted success.
//
// What is not: there is no model. Step i of the Script answers the
// request that holds i assistant turns, whatever the request says.
//
// How tests use it: New(script), then Start (or serve the Server as an
// http.Handler); Requests and Violations say what the client sent, and
// CheckDefaultTranscript checks DefaultScript's conversation field by
// field. DefaultScriptCells answers DefaultScript's cells in a
// sandboxtest manager the way the real interpreter does. It is a package
// of its own, not a _test file, so that tests elsewhere (the nested-KVM
// rig running `cellvm chat` against a real microVM) can start it; nothing
// but tests imports it.
package modeltest

// Call is one scripted tool call. Args is sent as the model would write
// it; it need not be valid JSON (a malformed call), and ID may be empty (a
// call without an id).
type Call struct {
	ID   string
	Name string
	Args string
}

// Step is one scripted assistant turn.
type Step struct {
	Text  string
	Calls []Call
}

// Script is a scripted conversation: step i answers the request that holds
// i assistant turns.
type Script []Step

// The default script's code. It runs as it is in a real sandbox: the first
// cell fails on a misspelt column, the second fixes it using the variable
// the first defined, the third prints long output and draws a chart.
const (
	CodeLoad  = "import pandas as pd\ndf = pd.DataFrame({'b': [1, 2, 3, 4]})\nprint(df['B'].mean())"
	CodeFix   = "print(df['b'].mean())"
	CodeChart = "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nfor i in range(3000):\n    print('row', i)\ndf.plot()\nplt.show()"
	Answer    = "The mean of column b is 2.5; the chart shows it rising from 1 to 4."
)

// DefaultScript is the conversation every adapter is tested with: the
// model asks for code, sees an error, fixes it, asks for a chart, answers.
func DefaultScript() Script {
	return Script{
		{Text: "Let me load the data.", Calls: []Call{{ID: "call_load", Name: "run_python", Args: jsonArgs(CodeLoad)}}},
		{Text: "The column is lower case; fixing.", Calls: []Call{{ID: "call_fix", Name: "run_python", Args: jsonArgs(CodeFix)}}},
		{Calls: []Call{{ID: "call_chart", Name: "run_python", Args: jsonArgs(CodeChart)}}},
		{Text: Answer},
	}
}

// MalformedScript is a turn of broken calls (arguments that are not JSON,
// an unknown tool, a call without an id, two calls sharing an id) followed
// by an answer.
func MalformedScript() Script {
	return Script{
		{Text: "Trying several things at once.", Calls: []Call{
			{ID: "call_badjson", Name: "run_python", Args: `{"code": "print(1)"`},
			{ID: "call_unknown", Name: "shell", Args: `{"cmd": "ls"}`},
			{ID: "", Name: "run_python", Args: jsonArgs("x = 1")},
			{ID: "call_dup", Name: "run_python", Args: jsonArgs("y = 2")},
			{ID: "call_dup", Name: "run_python", Args: jsonArgs("z = 3")},
		}},
		{Text: "Done."},
	}
}

func jsonArgs(code string) string {
	return `{"code": ` + quote(code) + `}`
}
