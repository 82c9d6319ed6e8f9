package cell

// EventType names a streaming event.
type EventType string

const (
	// EventStdout and EventStderr carry a piece of a stream in Text.
	EventStdout EventType = "stdout"
	EventStderr EventType = "stderr"
	// EventResult carries one rich output in Result.
	EventResult EventType = "result"
	// EventError carries the cell's error in Error.
	EventError EventType = "error"
	// EventEnd is the last event of a cell and carries the final Result in
	// End, which repeats everything streamed before it (clipped).
	EventEnd EventType = "end"
)

// Event is one line of the NDJSON stream sent while a cell runs:
//
//	{"type":"stdout","text":"hello\n"}
//	{"type":"result","result":{"main":true,"data":{"text/plain":"3"}}}
//	{"type":"error","error":{"name":"KeyError","value":"'x'","traceback":[...]}}
//	{"type":"end","end":{...Result...}}
//
// Streamed stdout/stderr text is the head of each stream (up to the head
// limit) as it is written; output past the head is only counted while the
// cell runs, and the end event's Result holds the head, the tail and the
// number of bytes cut between them.
type Event struct {
	Type   EventType `json:"type"`
	Text   string    `json:"text,omitempty"`
	Result *Display  `json:"result,omitempty"`
	Error  *Error    `json:"error,omitempty"`
	End    *Result   `json:"end,omitempty"`
}
