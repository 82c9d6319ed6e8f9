package modeltest

import (
	"fmt"
	"strings"
)

// CheckDefaultTranscript checks the last request of a DefaultScript
// conversation field by field and returns what is wrong (nothing when all
// is right). It is what a client must have sent back: each call's result
// under its id; the KeyError readable, without terminal codes, with the
// end of the traceback; the fixed value; the long output cut from the
// middle with the count stated; and the chart as an image, inside the
// result where the API allows it (inResult) or in the user turn after the
// results (Chat Completions).
func CheckDefaultTranscript(reqs []Request, inResult bool) []string {
	var bad []string
	fail := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	if len(reqs) != 4 {
		fail("%d requests, want 4", len(reqs))
		if len(reqs) == 0 {
			return bad
		}
	}
	turns := reqs[len(reqs)-1].Turns
	if len(turns) != 7 {
		fail("last request has %d turns, want 7: %+v", len(turns), turns)
		return bad
	}
	if tools := strings.Join(reqs[0].Tools, ","); !strings.Contains(tools, "run_python") {
		fail("tools offered: %s, want run_python among them", tools)
	}
	wantIDs := []string{"call_load", "call_fix", "call_chart"}
	for i, id := range wantIDs {
		a, u := turns[1+2*i], turns[2+2*i]
		if a.Role != "assistant" || len(a.Calls) != 1 || a.Calls[0].ID != id || a.Calls[0].Name != "run_python" {
			fail("turn %d: want one run_python call %s, got %+v", 1+2*i, id, a)
			continue
		}
		if u.Role != "user" || len(u.Results) != 1 || u.Results[0].ID != id {
			fail("turn %d: want one result for %s, got %+v", 2+2*i, id, u)
			continue
		}
		if t := u.Results[0].Text; strings.Contains(t, "\x1b") {
			fail("result %s has terminal codes: %q", id, t)
		}
	}
	if turns[0].Text == "" || turns[0].Role != "user" {
		fail("turn 0 is not the user's question: %+v", turns[0])
	}
	if len(turns[1].Calls) == 1 && !strings.Contains(turns[1].Calls[0].Args, "df['B']") {
		fail("call_load arguments not sent back as the model wrote them: %s", turns[1].Calls[0].Args)
	}
	if r := firstResult(turns[2]); r != nil {
		if !strings.Contains(r.Text, "KeyError") || !strings.Contains(r.Text, "'B'") {
			fail("call_load result lacks the error: %q", r.Text)
		}
		if !r.IsError && !strings.Contains(r.Text, "Error:") {
			fail("call_load result is not marked as an error: %q", r.Text)
		}
	}
	if r := firstResult(turns[4]); r != nil && !strings.Contains(r.Text, "2.5") {
		fail("call_fix result lacks 2.5: %q", r.Text)
	}
	if r := firstResult(turns[6]); r != nil {
		if !strings.Contains(r.Text, "characters cut from the middle") || !strings.Contains(r.Text, "row 0\n") || !strings.Contains(r.Text, "row 2999") {
			fail("call_chart output not cut from the middle with the count: %.300q", r.Text)
		}
		if len(r.Text) > 12000 {
			fail("call_chart result is %d bytes; the cut did not bound it", len(r.Text))
		}
		images := r.Images
		if !inResult {
			images = turns[6].Images
			if r.Images != 0 {
				fail("call_chart: images inside a tool result where the API has none")
			}
		}
		if images != 1 {
			fail("call_chart: %d images sent back, want 1", images)
		}
	}
	return bad
}

func firstResult(t Turn) *WireResult {
	if len(t.Results) == 0 {
		return nil
	}
	return &t.Results[0]
}
