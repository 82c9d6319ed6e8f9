package api

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// tarOf is a tar archive of the files (path -> content), in order.
func tarOf(t *testing.T, files ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+1 < len(files); i += 2 {
		if err := tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(files[i+1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// multipartBody is a POST /v1/images multipart body: the parts in order,
// as name, content.
func multipartBody(t *testing.T, parts ...string) (io.Reader, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(parts); i += 2 {
		w, err := mw.CreateFormField(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(parts[i+1]))
	}
	mw.Close()
	return &b, mw.FormDataContentType()
}

// ndjsonLines decodes a streamed answer.
func ndjsonLines(t *testing.T, body []byte) []ImageStreamLine {
	t.Helper()
	var out []ImageStreamLine
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var l ImageStreamLine
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		n := 0
		for _, set := range []bool{l.Event != nil, l.Image != nil, l.Error != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("line %q sets %d fields, want 1", sc.Text(), n)
		}
		out = append(out, l)
	}
	return out
}

// TestCreateImagePullJSON: a pull as JSON answers 201 with the image,
// which the list then has; the registry token reaches the manager and
// nothing else (the answer, the log, the audit record).
func TestCreateImagePullJSON(t *testing.T) {
	l, path := openAuditLog(t)
	e := newTestEnv(t, WithAudit(l))
	const secret = "registry-secret-7f3a9c"
	status, hdr, body := e.do(t, "POST", "/v1/images",
		jsonBody(`{"name":"py","pull":"docker.io/library/python:3.12-slim","registry_token":"`+secret+`","timeout_s":600}`),
		"Content-Type", "application/json")
	if status != http.StatusCreated || hdr.Get("Location") != "/v1/images/py" {
		t.Fatalf("pull: %d %s %s", status, hdr, body)
	}
	var info sandbox.ImageInfo
	if err := json.Unmarshal(body, &info); err != nil || info.Name != "py" || info.Source != sandbox.ImageSourcePull ||
		info.Ref != "docker.io/library/python:3.12-slim" || !strings.HasPrefix(info.Digest, "sha256:") {
		t.Fatalf("pull answered %s (%v)", body, err)
	}
	imgs, err := e.client.Images(context.Background())
	if err != nil || !slices.ContainsFunc(imgs, func(i sandbox.ImageInfo) bool { return i.Name == "py" && i.Source == "pull" }) {
		t.Errorf("Images after the pull: %+v %v", imgs, err)
	}
	// A failing pull with a token: the error names the registry, not the token.
	status, _, body = e.do(t, "POST", "/v1/images",
		jsonBody(`{"name":"py2","pull":"registry.invalid/x:1","registry_token":"`+secret+`"}`), "Content-Type", "application/json")
	ae := wantAPIError(t, "pull from a registry that never resolves", status, body, http.StatusBadGateway, CodeUpstream)
	if ae != nil && (ae.Step != sandbox.ImageStepFetch || !strings.Contains(ae.Message, "registry.invalid")) {
		t.Errorf("upstream error: %+v", ae)
	}
	recs := auditRecords(t, path)
	if len(recs) != 2 {
		t.Fatalf("audit: %+v", recs)
	}
	r := recs[0]
	if r.Action != "POST /v1/images" || r.Image != "py" || r.ImageSource != "pull" || r.ImageRef != "docker.io/library/python:3.12-slim" ||
		r.ImageDigest != info.Digest || r.ResultStatus != "ok" || r.Status != http.StatusCreated {
		t.Errorf("audit record of the pull: %+v", r)
	}
	if r := recs[1]; r.Image != "py2" || r.ResultStatus != CodeUpstream || r.Error != CodeUpstream || r.Status != http.StatusBadGateway {
		t.Errorf("audit record of the failed pull: %+v", r)
	}
	raw, _ := os.ReadFile(path)
	for what, s := range map[string]string{"audit log": string(raw), "server log": e.log.String(), "answer": string(body),
		"manager calls": strings.Join(e.fake.Calls(), "\n")} {
		if strings.Contains(s, secret) {
			t.Errorf("the registry token is in the %s: %s", what, s)
		}
	}
}

// TestCreateImageStream: with Accept: application/x-ndjson the answer is
// the events, one a line, then the image as the last line; the client
// hands each event to its callback.
func TestCreateImageStream(t *testing.T) {
	e := newTestEnv(t)
	status, hdr, body := e.do(t, "POST", "/v1/images", jsonBody(`{"name":"tools","recipe":{"steps":[{"apt":["jq","curl"]},{"run":"true"},{"env":["A=1"],"working_dir":"/srv","user":"1000"}]}}`),
		"Content-Type", "application/json", "Accept", NDJSONType)
	if status != http.StatusOK || hdr.Get("Content-Type") != NDJSONType {
		t.Fatalf("stream: %d %s %s", status, hdr, body)
	}
	lines := ndjsonLines(t, body)
	var steps []string
	for _, l := range lines[:len(lines)-1] {
		if l.Event == nil {
			t.Fatalf("a line before the last is not an event: %s", body)
		}
		if l.Event.Message == "" {
			steps = append(steps, l.Event.Step)
		}
	}
	want := []string{"boot", "extract", "apt", "run", "manifest", "mkfs", "install", "done"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	if !slices.ContainsFunc(lines, func(l ImageStreamLine) bool { return l.Event != nil && l.Event.Message == "Setting up curl" }) {
		t.Errorf("no output line of the apt step: %s", body)
	}
	last := lines[len(lines)-1].Image
	if last == nil || last.Name != "tools" || last.Source != "build" || !slices.Equal(last.Apt, []string{"jq", "curl"}) ||
		last.WorkingDir != "/srv" || last.User != "1000" || !slices.Equal(last.Env, []string{"A=1"}) {
		t.Fatalf("last line: %s", body)
	}

	// The client, with a callback.
	var got []sandbox.ImageEvent
	info, err := e.client.CreateImage(context.Background(), sandbox.ImageRequest{Name: "py", Pull: "python:3.12"},
		func(ev sandbox.ImageEvent) { got = append(got, ev) })
	if err != nil || info.Name != "py" || info.Ref != "python:3.12" {
		t.Fatalf("CreateImage: %+v %v", info, err)
	}
	if len(got) < 3 || got[0].Step != "fetch" || got[len(got)-1].Step != "done" ||
		!slices.ContainsFunc(got, func(ev sandbox.ImageEvent) bool { return ev.Total > 0 && ev.Done == ev.Total }) {
		t.Errorf("events %+v", got)
	}
	// ?stream=1 asks the same.
	status, hdr, _ = e.do(t, "POST", "/v1/images?stream=1", jsonBody(`{"name":"py3","pull":"python:3.12"}`))
	if status != http.StatusOK || hdr.Get("Content-Type") != NDJSONType {
		t.Errorf("?stream=1: %d %s", status, hdr)
	}
}

// TestCreateImageErrors: each sentinel reaches the caller as its status,
// plain or streamed, and the client maps it back.
func TestCreateImageErrors(t *testing.T) {
	e := newTestEnv(t, WithMaxImageUploadBytes(64<<10))
	ctx := context.Background()
	post := func(body string, hdr ...string) (int, http.Header, []byte) {
		return e.do(t, "POST", "/v1/images", jsonBody(body), append([]string{"Content-Type", "application/json"}, hdr...)...)
	}

	// 422 with the step and its tail, plain and streamed.
	failing := `{"name":"bad","recipe":{"steps":[{"apt":["jq"]},{"run":"exit 3"}]}}`
	status, _, body := post(failing)
	if ae := wantAPIError(t, "a failing run step", status, body, http.StatusUnprocessableEntity, CodeBuildFailed); ae != nil &&
		(ae.Step != "run" || !strings.Contains(ae.Tail, "exit status 3") || strings.Contains(ae.Message, "the last output")) {
		t.Errorf("build failure: %+v", ae)
	}
	status, _, body = post(failing, "Accept", NDJSONType)
	lines := ndjsonLines(t, body)
	if status != http.StatusOK || len(lines) < 2 || lines[0].Event == nil {
		t.Fatalf("streamed failure: %d %s", status, body)
	}
	if last := lines[len(lines)-1].Error; last == nil || last.Code != CodeBuildFailed || last.Step != "run" || !strings.Contains(last.Tail, "exit status 3") {
		t.Errorf("streamed failure's last line: %s", body)
	}
	var events int
	_, err := e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "bad", Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{{Run: "false"}}}},
		func(sandbox.ImageEvent) { events++ })
	var ae *Error
	if !errors.Is(err, sandbox.ErrBuildFailed) || !errors.As(err, &ae) || ae.Step != "run" || ae.Status != http.StatusUnprocessableEntity ||
		!strings.Contains(err.Error(), "exit status 1") || events == 0 {
		t.Errorf("client, streamed: %v (%d events)", err, events)
	}
	_, err = e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "bad", Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{{Run: "false"}}}}, nil)
	wantClientError(t, "client, plain", err, http.StatusUnprocessableEntity, CodeBuildFailed)
	// The client's error reads as the manager's: the contract's step error.
	var se *sandbox.ImageStepError
	if !errors.As(err, &se) || se.Step != "run" || !errors.Is(se, sandbox.ErrBuildFailed) {
		t.Errorf("client, plain: errors.As(%v, *sandbox.ImageStepError) = %+v; want step run, wrapping ErrBuildFailed", err, se)
	}

	// 502, through the client.
	_, err = e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "up", Pull: "nowhere.invalid/a/b:1"}, nil)
	if !errors.Is(err, sandbox.ErrUpstream) {
		t.Errorf("upstream: %v", err)
	}
	// 409 for a taken name; replace makes it anew.
	if _, err := e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "twice", Pull: "alpine:3"}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "twice", Pull: "alpine:3.20"}, nil)
	wantClientError(t, "a taken name", err, http.StatusConflict, CodeBusy)
	if info, err := e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "twice", Pull: "alpine:3.20", Replace: true}, nil); err != nil || info.Ref != "alpine:3.20" {
		t.Errorf("replace: %+v %v", info, err)
	}
	// 429 from the manager.
	e.fake.Fail("CreateImage", fmt.Errorf("%w: tenant x has 32 images, its cap (max_images)", sandbox.ErrQuota))
	status, hdr, body := post(`{"name":"q","pull":"alpine:3"}`)
	wantAPIError(t, "quota", status, body, http.StatusTooManyRequests, CodeQuota)
	if hdr.Get("Retry-After") == "" {
		t.Error("a quota refusal without Retry-After")
	}
	e.fake.Fail("CreateImage", nil)

	// 400s, none of which reaches the manager.
	before := len(e.fake.Calls())
	for _, c := range []struct{ what, body string }{
		{"bad name", `{"name":"Bad","pull":"alpine:3"}`},
		{"default", `{"name":"default","pull":"alpine:3"}`},
		{"two sources", `{"name":"a","pull":"alpine:3","recipe":{"steps":[{"run":"true"}]}}`},
		{"none", `{"name":"a"}`},
		{"import as JSON", `{"name":"a","import":true}`},
		{"unknown field", `{"name":"a","pull":"alpine:3","pul":"x"}`},
		{"timeout", `{"name":"a","pull":"alpine:3","timeout_s":99999999}`},
		{"negative timeout", `{"name":"a","pull":"alpine:3","timeout_s":-1}`},
		{"platform", `{"name":"a","pull":"alpine:3","platform":"linux/arm64"}`},
		{"bad apt", `{"name":"a","recipe":{"steps":[{"apt":["-o=x"]}]}}`},
		{"empty", ``},
	} {
		status, _, body := post(c.body)
		wantAPIError(t, c.what, status, body, http.StatusBadRequest, CodeInvalid)
	}
	status, _, body = e.do(t, "POST", "/v1/images", jsonBody(`{}`), "Content-Type", "text/plain")
	wantAPIError(t, "text/plain", status, body, http.StatusBadRequest, CodeInvalid)
	mb, ct := multipartBody(t, "archive", "x", "request", `{"name":"a","import":true}`)
	status, _, body = e.do(t, "POST", "/v1/images", mb, "Content-Type", ct)
	wantAPIError(t, "archive before request", status, body, http.StatusBadRequest, CodeInvalid)
	mb, ct = multipartBody(t, "request", `{"name":"a","import":true}`, "extra", "x")
	status, _, body = e.do(t, "POST", "/v1/images", mb, "Content-Type", ct)
	wantAPIError(t, "a part not named archive", status, body, http.StatusBadRequest, CodeInvalid)
	if calls := e.fake.Calls()[before:]; len(calls) != 0 {
		t.Errorf("refused requests reached the manager: %v", calls)
	}
	// A recipe on a base there is not: the manager's 400.
	_, err = e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "a", Recipe: &sandbox.ImageRecipe{Base: "nope", Steps: []sandbox.RecipeStep{{Run: "true"}}}}, nil)
	if ae := wantClientError(t, "unknown base", err, http.StatusBadRequest, CodeInvalid); !strings.Contains(ae.Message, `no image "nope"`) {
		t.Errorf("unknown base: %v", ae)
	}

	// 413: an archive past the limit, declared or not.
	big := tarOf(t, "manifest.json", strings.Repeat("x", 128<<10))
	_, err = e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "big", Import: true, Archive: io.MultiReader(bytes.NewReader(big))}, nil)
	wantClientError(t, "archive too large", err, http.StatusRequestEntityTooLarge, CodeTooLarge)
	_, err = e.client.CreateImage(ctx, sandbox.ImageRequest{Name: "big", Import: true, Archive: bytes.NewReader(big)}, func(sandbox.ImageEvent) {})
	if !errors.Is(err, sandbox.ErrTooLarge) {
		t.Errorf("archive too large, streamed: %v", err)
	}
	if slices.ContainsFunc(mustImages(t, e), func(i sandbox.ImageInfo) bool { return i.Name == "big" }) {
		t.Error("a cut archive made an image")
	}
}

func mustImages(t *testing.T, e *testEnv) []sandbox.ImageInfo {
	t.Helper()
	imgs, err := e.client.Images(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return imgs
}

// TestCreateImageMultipartStreams: an import's archive reaches the
// manager while the client still sends it, and the progress comes back
// meanwhile: the client holds back the archive's second half until it
// has seen the manager's read event, which a server that buffered the
// body would never send.
func TestCreateImageMultipartStreams(t *testing.T) {
	e := newTestEnv(t)
	archive := tarOf(t, "oci-layout", `{"imageLayoutVersion":"1.0.0"}`, "index.json", strings.Repeat("{}", 64<<10))
	pr, pw := io.Pipe()
	sawRead := make(chan struct{})
	go func() {
		half := len(archive) / 2
		pw.Write(archive[:half])
		select {
		case <-sawRead:
		case <-time.After(10 * time.Second):
			pw.CloseWithError(errors.New("the read event never came while the archive was being sent"))
			return
		}
		pw.Write(archive[half:])
		pw.Close()
	}()
	var once bool
	info, err := e.client.CreateImage(context.Background(), sandbox.ImageRequest{Name: "imp", Import: true, Archive: pr},
		func(ev sandbox.ImageEvent) {
			if ev.Step == sandbox.ImageStepRead && !once {
				once = true
				close(sawRead)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if info.Source != "import" || info.SizeBytes != int64(len(archive)) || !strings.HasPrefix(info.Digest, "sha256:") {
		t.Errorf("import: %+v (archive %d bytes)", info, len(archive))
	}
	// A recipe with its inputs in the archive, without progress.
	inputs := tarOf(t, "files/etc/motd", "hi\n", "requirements.txt", "six\n")
	info, err = e.client.CreateImage(context.Background(), sandbox.ImageRequest{Name: "rec", Archive: bytes.NewReader(inputs),
		Recipe: &sandbox.ImageRecipe{Base: "team", Steps: []sandbox.RecipeStep{{CopyFrom: "files", CopyTo: "/"}, {Requirements: "requirements.txt", PipIndex: "https://pypi.org/simple"}}}}, nil)
	if err != nil || info.Base != "team" || info.Source != "build" {
		t.Fatalf("recipe with inputs: %+v %v", info, err)
	}
	_, err = e.client.CreateImage(context.Background(), sandbox.ImageRequest{Name: "rec2", Archive: bytes.NewReader(inputs),
		Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{{CopyFrom: "nothere"}}}}, nil)
	wantClientError(t, "a step naming a path the archive lacks", err, http.StatusBadRequest, CodeInvalid)
}

// TestCreateImageTenants: a tenant's image is its own: another tenant
// neither lists it, nor deletes it, nor builds on it.
func TestCreateImageTenants(t *testing.T) {
	e := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return tenant.New(m, tenant.Options{}) }, nil)
	ctx := context.Background()
	alpha, beta := e.client.ForTenant("alpha"), e.client.ForTenant("beta")
	info, err := alpha.CreateImage(ctx, sandbox.ImageRequest{Name: "mine", Tenant: "beta", Pull: "alpine:3"}, nil)
	if err != nil || info.Tenant != "alpha" {
		t.Fatalf("alpha's pull: %+v %v", info, err)
	}
	has := func(c *Client, name string) bool {
		imgs, err := c.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(imgs, func(i sandbox.ImageInfo) bool { return i.Name == name })
	}
	if !has(alpha, "mine") || has(beta, "mine") || !has(e.client, "mine") {
		t.Errorf("alpha %v, beta %v, operator %v", has(alpha, "mine"), has(beta, "mine"), has(e.client, "mine"))
	}
	wantClientError(t, "beta deletes alpha's image", beta.DeleteImage(ctx, "mine"), http.StatusNotFound, CodeNotFound)
	_, err = beta.CreateImage(ctx, sandbox.ImageRequest{Name: "on-top", Recipe: &sandbox.ImageRecipe{Base: "mine", Steps: []sandbox.RecipeStep{{Run: "true"}}}}, nil)
	if ae := wantClientError(t, "beta builds on alpha's image", err, http.StatusBadRequest, CodeInvalid); ae != nil && !strings.Contains(ae.Message, `no image "mine"`) {
		t.Errorf("beta on alpha's base: %s", ae.Message)
	}
	if _, err := alpha.CreateImage(ctx, sandbox.ImageRequest{Name: "on-top", Recipe: &sandbox.ImageRecipe{Base: "mine", Steps: []sandbox.RecipeStep{{Run: "true"}}}}, nil); err != nil {
		t.Errorf("alpha on its own base: %v", err)
	}
	if err := alpha.DeleteImage(ctx, "on-top"); err != nil {
		t.Errorf("alpha deletes its image: %v", err)
	}
}
