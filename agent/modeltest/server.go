package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
)

// API names a wire format.
type API string

const (
	Anthropic API = "anthropic"
	OpenAI    API = "openai"
	Responses API = "responses"
	Gemini    API = "gemini"
)

// Fault is an error response served instead of the script's next step.
type Fault struct {
	Status     int
	RetryAfter string // Retry-After header value, if any
}

// Turn is one turn of a request's history as the server read it, in the
// same shape for every API, for tests to check field by field.
type Turn struct {
	Role    string // "user" or "assistant"
	Text    string
	Calls   []WireCall
	Results []WireResult
	// Images counts images in the turn outside tool results (Chat
	// Completions carries a call's images in a user message).
	Images int
}

// WireCall is a tool call found in a request's history.
type WireCall struct {
	ID, Name, Args string
	// Signature is Gemini's thoughtSignature on the part.
	Signature string
}

// WireResult is a tool result found in a request's history.
type WireResult struct {
	ID, Name, Text string
	IsError        bool
	Images         int
}

// Request is one request the server received.
type Request struct {
	API   API
	Path  string
	Body  []byte
	Turns []Turn
	// Tools are the tool names the request offered.
	Tools []string
}

// Server plays a Script over every API.
type Server struct {
	Script Script
	// APIKey, when set, is required in each API's auth header.
	APIKey string

	mu         sync.Mutex
	faults     []Fault
	requests   []Request
	violations []string
}

// New returns a server for script.
func New(script Script) *Server { return &Server{Script: script} }

// Start serves s on a loopback port; close the result when done.
func (s *Server) Start() *httptest.Server { return httptest.NewServer(s) }

// AddFaults queues error responses served before the script resumes.
func (s *Server) AddFaults(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f...)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Violations returns the protocol rules broken by requests so far.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

func apiOf(path string) (API, bool) {
	switch {
	case strings.HasSuffix(path, "/v1/messages"):
		return Anthropic, true
	case strings.HasSuffix(path, "/chat/completions"):
		return OpenAI, true
	case strings.HasSuffix(path, "/responses"):
		return Responses, true
	case strings.Contains(path, ":generateContent"):
		return Gemini, true
	}
	return "", false
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	api, ok := apiOf(r.URL.Path)
	if !ok || r.Method != http.MethodPost {
		http.Error(w, "modeltest: no such endpoint", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		writeError(w, api, http.StatusBadRequest, "invalid_request_error", "read body: "+err.Error())
		return
	}
	if s.APIKey != "" && !authorized(api, r, s.APIKey) {
		writeError(w, api, http.StatusUnauthorized, "authentication_error", "invalid api key")
		return
	}
	s.mu.Lock()
	if len(s.faults) > 0 {
		f := s.faults[0]
		s.faults = s.faults[1:]
		s.mu.Unlock()
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		typ := "api_error"
		if f.Status == http.StatusTooManyRequests {
			typ = "rate_limit_error"
		}
		writeError(w, api, f.Status, typ, "scripted fault")
		return
	}
	s.mu.Unlock()

	turns, tools, problems := parse(api, body)
	problems = append(problems, checkTurns(api, turns)...)
	s.mu.Lock()
	s.requests = append(s.requests, Request{API: api, Path: r.URL.Path, Body: body, Turns: turns, Tools: tools})
	s.violations = append(s.violations, problems...)
	s.mu.Unlock()
	if len(problems) > 0 {
		writeError(w, api, http.StatusBadRequest, "invalid_request_error", strings.Join(problems, "; "))
		return
	}
	n := 0
	for _, t := range turns {
		if t.Role == "assistant" {
			n++
		}
	}
	step := Step{Text: "(the fake model's script has ended)"}
	if n < len(s.Script) {
		step = s.Script[n]
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_fake_"+strconv.Itoa(n))
	json.NewEncoder(w).Encode(respond(api, n, step))
}

func authorized(api API, r *http.Request, key string) bool {
	switch api {
	case Anthropic:
		return r.Header.Get("x-api-key") == key
	case Gemini:
		return r.Header.Get("x-goog-api-key") == key || r.URL.Query().Get("key") == key
	}
	return r.Header.Get("Authorization") == "Bearer "+key
}

// writeError writes an error in the API's own shape.
func writeError(w http.ResponseWriter, api API, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var v any
	switch api {
	case Anthropic:
		v = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	case Gemini:
		v = map[string]any{"error": map[string]any{"code": status, "message": msg, "status": strings.ToUpper(typ)}}
	default:
		v = map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": nil}}
	}
	json.NewEncoder(w).Encode(v)
}

// checkTurns applies the rules every API enforces on tool use.
func checkTurns(api API, turns []Turn) []string {
	var bad []string
	if len(turns) == 0 {
		return []string{"the request has no messages"}
	}
	if turns[len(turns)-1].Role != "user" {
		bad = append(bad, "the last turn is not the user's")
	}
	for i, t := range turns {
		if t.Role == "user" && len(t.Results) > 0 && (i == 0 || len(turns[i-1].Calls) == 0) {
			bad = append(bad, fmt.Sprintf("turn %d has tool results but the turn before made no calls", i))
		}
		if t.Role != "assistant" || len(t.Calls) == 0 {
			continue
		}
		if i+1 >= len(turns) || turns[i+1].Role != "user" {
			bad = append(bad, fmt.Sprintf("turn %d made tool calls that no user turn answers", i))
			continue
		}
		bad = append(bad, matchResults(api, i, t.Calls, turns[i+1].Results)...)
	}
	return bad
}

func matchResults(api API, turn int, calls []WireCall, results []WireResult) []string {
	var bad []string
	seen := map[string]int{}
	var anonCalls, anonResults []string
	for _, c := range calls {
		if c.ID == "" {
			if api != Gemini {
				bad = append(bad, fmt.Sprintf("turn %d: a %s call has no id", turn, c.Name))
			}
			anonCalls = append(anonCalls, c.Name)
			continue
		}
		if _, dup := seen[c.ID]; dup {
			bad = append(bad, fmt.Sprintf("turn %d: call id %s used twice", turn, c.ID))
		}
		seen[c.ID] = 0
	}
	for _, r := range results {
		if r.ID == "" {
			anonResults = append(anonResults, r.Name)
			continue
		}
		n, ok := seen[r.ID]
		if !ok {
			bad = append(bad, fmt.Sprintf("turn %d: tool result for unknown call id %s", turn+1, r.ID))
			continue
		}
		seen[r.ID] = n + 1
	}
	for id, n := range seen {
		if n != 1 {
			bad = append(bad, fmt.Sprintf("turn %d: call %s has %d results, want 1", turn, id, n))
		}
	}
	if strings.Join(anonCalls, ",") != strings.Join(anonResults, ",") {
		bad = append(bad, fmt.Sprintf("turn %d: calls without id %v answered by %v", turn, anonCalls, anonResults))
	}
	return bad
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
