package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type openAPIDocument struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas    map[string]json.RawMessage `json:"schemas"`
		Responses  map[string]json.RawMessage `json:"responses"`
		Parameters map[string]json.RawMessage `json:"parameters"`
	} `json:"components"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

func parseOpenAPI(t *testing.T) openAPIDocument {
	t.Helper()
	var doc openAPIDocument
	dec := json.NewDecoder(bytes.NewReader(OpenAPI()))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi version %q, want 3.0.x", doc.OpenAPI)
	}
	return doc
}

// TestOpenAPIMatchesRoutes keeps the document and the route table in step:
// the set of (method, path) pairs must be equal.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := parseOpenAPI(t)
	var inDoc []string
	for p, item := range doc.Paths {
		for method := range item {
			if slices.Contains(httpMethods, method) {
				inDoc = append(inDoc, strings.ToUpper(method)+" "+p)
			}
		}
	}
	var inMux []string
	for _, rt := range routes() {
		inMux = append(inMux, rt.method+" "+strings.ReplaceAll(rt.pattern, "...}", "}"))
	}
	slices.Sort(inDoc)
	slices.Sort(inMux)
	if !slices.Equal(inDoc, inMux) {
		for _, r := range inMux {
			if !slices.Contains(inDoc, r) {
				t.Errorf("route %s is not in openapi.json", r)
			}
		}
		for _, r := range inDoc {
			if !slices.Contains(inMux, r) {
				t.Errorf("openapi.json documents %s, which is not a route", r)
			}
		}
	}
}

// TestOpenAPIRoutesAreServed checks that every route in the table reaches a
// handler (not the JSON 404/405 for unrouted requests).
func TestOpenAPIRoutesAreServed(t *testing.T) {
	e := newTestEnv(t)
	for _, rt := range routes() {
		p := strings.NewReplacer("{id}", "nope", "{path...}", "workspace/x").Replace(rt.pattern)
		if rt.pattern == "/v1/events" {
			// A stream that never ends: its status is enough.
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, rt.method, "http://cellvm"+p, nil)
			resp, err := e.raw.Do(req)
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != NDJSONType {
				t.Errorf("%s %s: %v %v", rt.method, p, resp, err)
			}
			cancel()
			continue
		}
		status, _, body := e.do(t, rt.method, p, strings.NewReader(`{}`))
		if strings.Contains(string(body), "no route for") || status == http.StatusMethodNotAllowed {
			t.Errorf("%s %s: not routed (%d %s)", rt.method, p, status, body)
		}
	}
}

var refPattern = regexp.MustCompile(`"\$ref":\s*"#/components/(schemas|responses|parameters)/([^"]+)"`)

func TestOpenAPIIsWellFormed(t *testing.T) {
	doc := parseOpenAPI(t)
	for _, m := range refPattern.FindAllStringSubmatch(string(OpenAPI()), -1) {
		var ok bool
		switch m[1] {
		case "schemas":
			_, ok = doc.Components.Schemas[m[2]]
		case "responses":
			_, ok = doc.Components.Responses[m[2]]
		case "parameters":
			_, ok = doc.Components.Parameters[m[2]]
		}
		if !ok {
			t.Errorf("dangling $ref %s/%s", m[1], m[2])
		}
	}
	if strings.Count(string(OpenAPI()), `"$ref"`) != len(refPattern.FindAllString(string(OpenAPI()), -1)) {
		t.Error("a $ref points outside #/components")
	}
	for _, name := range []string{"Config", "Info", "Result", "Event", "ExecRequest", "ExecResult", "Error", "NetworkPolicy", "CellRequest"} {
		if _, ok := doc.Components.Schemas[name]; !ok {
			t.Errorf("schema %s missing", name)
		}
	}
	for p, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			var op struct {
				OperationID string                     `json:"operationId"`
				Responses   map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, p, err)
			}
			if op.OperationID == "" || len(op.Responses) == 0 {
				t.Errorf("%s %s: no operationId or responses", method, p)
			}
		}
	}
	// Every error code the server can send is in the Error schema's enum.
	var errSchema struct {
		Properties struct {
			Code struct {
				Enum []string `json:"enum"`
			} `json:"code"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["Error"], &errSchema); err != nil {
		t.Fatal(err)
	}
	for _, c := range codeTable {
		if !slices.Contains(errSchema.Properties.Code.Enum, c.code) {
			t.Errorf("error code %q not in the Error schema", c.code)
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	e := newTestEnv(t)
	got, err := e.client.OpenAPI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(OpenAPI())) {
		t.Error("served document differs from the embedded one")
	}
}
