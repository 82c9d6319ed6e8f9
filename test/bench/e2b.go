package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/api/e2b"
	"github.com/cellvm/cellvm/sandbox/engine"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// benchE2B measures what the E2B front end costs: create to the first
// code result through E2B's wire (POST /sandboxes on api.DOMAIN, then
// /execute on 49999-ID.DOMAIN, as Sandbox.create() and runCode() send
// them) against cellvm's own API (POST /v1/sandboxes, then the cell), on
// one TLS listener over one manager, the two alternating in one run.
// Both boot cold (no template), so the ratio is the front end's.
func benchE2B(cellvm, build string) error {
	inner, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{})
	if err != nil {
		return err
	}
	defer done()
	const token = "bench-token-0123456789abcdef"
	tokens, err := api.ParseTokens([]byte(token + "\n"))
	if err != nil {
		return err
	}
	// Errors only: an internal error of the front end says why here.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	m := tenant.New(inner, tenant.Options{Log: log})
	own := api.RequireToken(api.NewServer(m, log), tokens, log)
	const domain = "bench.e2b.test"
	h, err := e2b.NewHandler(m, e2b.Options{Domain: domain, Tokens: tokens, Next: own, Log: log})
	if err != nil {
		return err
	}
	srv := httptest.NewUnstartedServer(h)
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	// Every name reaches the listener, as wildcard DNS would; the bench
	// is not about certificates.
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	b := e2bBench{c: client, token: token, domain: domain}
	fmt.Println("\nE2B front end (create to the first runCode result, against cellvm's own API; cold boots)")
	const rounds = 3
	var viaE2B, viaOwn []time.Duration
	for i := range rounds {
		d, err := b.e2b()
		if err != nil {
			return fmt.Errorf("E2B round %d: %w", i+1, err)
		}
		viaE2B = append(viaE2B, d)
		o, err := b.own()
		if err != nil {
			return fmt.Errorf("own API round %d: %w", i+1, err)
		}
		viaOwn = append(viaOwn, o)
		fmt.Printf("round %d: E2B %v, cellvm API %v\n", i+1, d.Round(time.Millisecond), o.Round(time.Millisecond))
	}
	e, o := medianDur(viaE2B), medianDur(viaOwn)
	fmt.Printf("ratio E2B front end / cellvm API: create to first result %.2f (%v vs %v, medians of %d)\n",
		float64(e)/float64(o), e.Round(time.Millisecond), o.Round(time.Millisecond), rounds)
	return nil
}

type e2bBench struct {
	c             *http.Client
	token, domain string
}

// call sends a JSON request and decodes a JSON answer (out nil: the body
// is returned as it is).
func (b e2bBench) call(method, url string, hdr map[string]string, in, out any) ([]byte, error) {
	body, _ := json.Marshal(in)
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(raw))
	}
	if out != nil {
		return raw, json.Unmarshal(raw, out)
	}
	return raw, nil
}

// e2b is Sandbox.create() then runCode('print(sum(range(10)))').
func (b e2bBench) e2b() (time.Duration, error) {
	start := time.Now()
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	key := map[string]string{"X-API-KEY": b.token}
	if _, err := b.call("POST", "https://api."+b.domain+"/sandboxes", key,
		map[string]any{"templateID": "code-interpreter-v1", "timeout": 300, "allow_internet_access": false}, &sb); err != nil {
		return 0, err
	}
	defer b.call("DELETE", "https://api."+b.domain+"/sandboxes/"+sb.SandboxID, key, nil, nil)
	raw, err := b.call("POST", "https://49999-"+sb.SandboxID+"."+b.domain+"/execute",
		map[string]string{"X-Access-Token": sb.EnvdAccessToken}, map[string]any{"code": "print(sum(range(10)))"}, nil)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var line struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Type == "stdout" && strings.Contains(line.Text, "45") {
			return d, nil
		}
	}
	return 0, fmt.Errorf("/execute did not print 45: %s", raw)
}

// own is POST /v1/sandboxes then the same cell, with the bearer token.
func (b e2bBench) own() (time.Duration, error) {
	start := time.Now()
	auth := map[string]string{"Authorization": "Bearer " + b.token}
	var sb struct {
		ID string `json:"id"`
	}
	if _, err := b.call("POST", "https://cellvm.bench/v1/sandboxes", auth, map[string]any{"memory_mib": 512}, &sb); err != nil {
		return 0, err
	}
	defer b.call("DELETE", "https://cellvm.bench/v1/sandboxes/"+sb.ID, auth, nil, nil)
	var res struct {
		Stdout string `json:"stdout"`
	}
	if _, err := b.call("POST", "https://cellvm.bench/v1/sandboxes/"+sb.ID+"/cells", auth, map[string]any{"code": "print(sum(range(10)))"}, &res); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if res.Stdout != "45\n" {
		return 0, fmt.Errorf("the cell printed %q", res.Stdout)
	}
	return d, nil
}
