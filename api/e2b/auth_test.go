package e2b

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestMinter(t *testing.T) {
	k := minter{key: []byte(strings.Repeat("k", keyLen))}
	tok := k.token(envdKind, "alpha", "sb-1")
	if ten, ok := k.check(tok, "sb-1", envdKind); !ok || ten != "alpha" {
		t.Fatalf("own token: %q %v", ten, ok)
	}
	if ten, ok := k.check(k.token(envdKind, "", "sb-1"), "sb-1", envdKind); !ok || ten != "default" {
		t.Fatalf("no tenant reads as default: %q %v", ten, ok)
	}
	bad := map[string]string{
		"other sandbox":  tok,
		"other kind":     k.token(trafficKind, "alpha", "sb-1"),
		"other key":      minter{key: []byte(strings.Repeat("x", keyLen))}.token(envdKind, "alpha", "sb-1"),
		"tenant swapped": envdKind + "YmV0YQ." + strings.SplitN(tok, ".", 2)[1], // "beta" with alpha's MAC
		"no mac":         envdKind + "YWxwaGE",
		"empty":          "",
		"long":           strings.Repeat("a", 300),
		"bad tenant":     k.token(envdKind, "Bad Tenant", "sb-1"),
	}
	for name, tok := range bad {
		id := "sb-1"
		if name == "other sandbox" {
			id = "sb-2"
		}
		if _, ok := k.check(tok, id, envdKind); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSandboxHostNeedsItsToken(t *testing.T) {
	r := newRig(t)
	a := r.create(keyAlpha, nil)
	b := r.create(keyBeta, nil)
	envd := "49983-" + a.SandboxID + "." + testDomain
	for name, hdr := range map[string]map[string]string{
		"none":                   nil,
		"the API key":            {"X-Access-Token": keyAlpha, "X-API-KEY": keyAlpha},
		"another sandbox's":      {"X-Access-Token": b.EnvdAccessToken},
		"the traffic token":      {"X-Access-Token": a.TrafficAccessToken, "E2B-Traffic-Access-Token": a.TrafficAccessToken},
		"garbage":                {"X-Access-Token": "cve_!!!.zz"},
		"a token for no sandbox": {"X-Access-Token": r.h.minter.token(envdKind, "alpha", "sb-fake99")},
	} {
		wantE2BError(t, "envd with "+name, r.do("GET", envd, "/health", hdr, nil, nil), http.StatusUnauthorized, "access token")
	}
	// A token for a sandbox id that does not exist is as good as a wrong
	// one: nobody learns which ids exist.
	wantE2BError(t, "missing sandbox", r.do("GET", "49983-sb-fake99."+testDomain, "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken}, nil, nil),
		http.StatusUnauthorized, "access token")
	// The right token passes the gate (envd's placeholder or handler
	// answers, never 401).
	if res := r.do("GET", envd, "/health", map[string]string{"X-Access-Token": a.EnvdAccessToken}, nil, nil); res.StatusCode == http.StatusUnauthorized {
		t.Fatalf("envd with its token: %d", res.StatusCode)
	}
	// The interpreter takes either token (the SDK's /contexts calls send
	// only the traffic one).
	for _, hdr := range []map[string]string{{"X-Access-Token": a.EnvdAccessToken}, {"E2B-Traffic-Access-Token": a.TrafficAccessToken}} {
		if res := r.do("GET", "49999-"+a.SandboxID+"."+testDomain, "/contexts", hdr, nil, nil); res.StatusCode == http.StatusUnauthorized {
			t.Fatalf("interpreter with %v: %d", hdr, res.StatusCode)
		}
	}
	wantE2BError(t, "interpreter without", r.do("GET", "49999-"+a.SandboxID+"."+testDomain, "/contexts", nil, nil, nil), http.StatusUnauthorized, "token")
}

func TestPortProxy(t *testing.T) {
	r := newRig(t)
	a := r.create(keyAlpha, nil)
	b := r.create(keyBeta, nil)
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		leaked := req.Header.Get("X-Access-Token") + req.Header.Get("E2B-Traffic-Access-Token")
		io.WriteString(w, "hello from "+req.Host+" "+req.URL.RequestURI()+" leaked="+leaked)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go app.Serve(ln)
	t.Cleanup(func() { app.Close() })
	r.fake.listen(a.SandboxID, 8000, ln.Addr().String())

	host := "8000-" + a.SandboxID + "." + testDomain
	for _, hdr := range []map[string]string{{"E2B-Traffic-Access-Token": a.TrafficAccessToken}, {"X-Access-Token": a.EnvdAccessToken}} {
		body := wantStatus(t, "port 8000", r.do("GET", host, "/x?y=1", hdr, nil, nil), http.StatusOK)
		if body != "hello from "+host+" /x?y=1 leaked=" {
			t.Fatalf("the app answered %q", body)
		}
	}
	wantE2BError(t, "port 8000 without a token", r.do("GET", host, "/", nil, nil, nil), http.StatusUnauthorized, "token")
	wantE2BError(t, "port 8000 with beta's token", r.do("GET", host, "/", map[string]string{"E2B-Traffic-Access-Token": b.TrafficAccessToken}, nil, nil),
		http.StatusUnauthorized, "token")
	// Nothing listening: 502 with a body that says so.
	body := wantStatus(t, "port 9000", r.do("GET", "9000-"+a.SandboxID+"."+testDomain, "/", map[string]string{"E2B-Traffic-Access-Token": a.TrafficAccessToken}, nil, nil),
		http.StatusBadGateway)
	if !strings.Contains(body, "nothing listens on port 9000") {
		t.Fatalf("502 body %q", body)
	}
	// A killed sandbox's port: 404, not a dial.
	wantStatus(t, "kill", r.api("DELETE", "/sandboxes/"+a.SandboxID, keyAlpha, nil, nil), http.StatusNoContent)
	wantStatus(t, "port of a killed sandbox", r.do("GET", host, "/", map[string]string{"E2B-Traffic-Access-Token": a.TrafficAccessToken}, nil, nil), http.StatusNotFound)
}
