package api

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMCPRoute: /mcp is in the route table; with WithMCP its methods reach
// the injected handler (which can flush a stream through the server), and
// without it the route answers a JSON 404 that says MCP is off.
func TestMCPRoute(t *testing.T) {
	var got []string
	mcp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\n\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the server: %v", err)
		}
	})
	on := httptest.NewServer(NewServer(nil, nil, WithMCP(mcp)))
	defer on.Close()
	for _, m := range []string{"POST", "GET", "DELETE"} {
		req, _ := http.NewRequest(m, on.URL+MCPPath, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || line != "event: message\n" {
			t.Errorf("%s %s: %d %q, want the MCP handler's answer", m, MCPPath, resp.StatusCode, line)
		}
	}
	if strings.Join(got, ",") != "POST,GET,DELETE" {
		t.Errorf("the MCP handler saw %v", got)
	}
	req, _ := http.NewRequest("PUT", on.URL+MCPPath, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT %s: %v %v, want 405", MCPPath, resp, err)
	} else {
		resp.Body.Close()
	}

	off := httptest.NewServer(NewServer(nil, nil))
	defer off.Close()
	resp, err := http.Post(off.URL+MCPPath, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusNotFound ||
		e.Error.Code != CodeNotFound || !strings.Contains(e.Error.Message, "--mcp") {
		t.Errorf("without MCP: %d %+v %v, want 404 not_found naming --mcp", resp.StatusCode, e, err)
	}
	found := map[string]bool{}
	for _, rt := range routes() {
		if rt.pattern == MCPPath {
			found[rt.method] = true
		}
	}
	if len(found) != 3 || !found["GET"] || !found["POST"] || !found["DELETE"] {
		t.Errorf("the route table has %s for %v, want GET, POST and DELETE", MCPPath, found)
	}
}
