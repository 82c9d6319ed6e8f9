package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func openTest(t *testing.T, opt Options) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

// readAll reads every record of the log's files, oldest first.
func readAll(t *testing.T, path string) []Record {
	t.Helper()
	var out []Record
	for _, p := range Files(path) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		err = Read(f, Filter{}, func(r Record) error { out = append(out, r); return nil })
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	return out
}

func TestRecordFieldsAndNames(t *testing.T) {
	l, path := openTest(t, Options{FullCode: true})
	rec := Record{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)), Tenant: "alpha", TokenID: "tk-1a2b3c", Peer: "192.0.2.1", Operator: true,
		Action: "POST /v1/sandboxes/{id}/cells", Sandbox: "sb-1", Snapshot: "snap-1", Workspace: "data", Image: "default",
		Path: "/work/a.txt", Size: 12, SHA256: strings.Repeat("ab", 32),
		Policy: &PolicyChange{OldAllow: []string{}, NewAllow: []string{"pypi.org"}},
		Status: 200, ResultStatus: "ok", KilledBy: "timeout", DurationMS: 1.5, Error: "invalid", Reason: "no",
		Egress:     &Egress{Allowed: 3, Dropped: 1, DNSForwarded: 2, DNSRefused: 4, Names: []EgressName{{Name: "pypi.org", Forwarded: 2}}},
		Suppressed: 7,
	}
	rec.SetCode("print(1)")
	if err := l.Write(rec); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := "action code code_bytes code_sha256 duration_ms egress error image killed_by operator path peer policy reason result_status sandbox sha256 size snapshot status suppressed tenant time token_id workspace"
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("JSON names changed:\n got %s\nwant %s", got, want)
	}
	if m["time"] != "2026-01-02T02:04:05.000000006Z" {
		t.Errorf("time %v, want UTC RFC 3339", m["time"])
	}
	sum := sha256.Sum256([]byte("print(1)"))
	if m["code_sha256"] != hex.EncodeToString(sum[:]) || m["code_bytes"] != 8.0 || m["code"] != "print(1)" {
		t.Errorf("code fields %v %v %v", m["code_sha256"], m["code_bytes"], m["code"])
	}
	if !strings.Contains(string(b), `"policy":{"old_allow":[],"new_allow":["pypi.org"]}`) {
		t.Errorf("an empty old allow list must read as []: %s", b)
	}
	got := readAll(t, path)
	rec.Time = rec.Time.UTC()
	if len(got) != 1 || !reflect.DeepEqual(got[0], rec) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, rec)
	}
}

// TestNoFieldForAToken walks Record's type: nothing in it could carry a
// bearer token, so no handler can put one in the log by mistake.
func TestNoFieldForAToken(t *testing.T) {
	var walk func(reflect.Type, string)
	walk = func(ty reflect.Type, at string) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || ty == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			name := strings.ToLower(f.Name + " " + f.Tag.Get("json"))
			if f.Name != "TokenID" && (strings.Contains(name, "token") || strings.Contains(name, "secret") ||
				strings.Contains(name, "auth") || strings.Contains(name, "env") && !strings.Contains(name, "egress")) {
				t.Errorf("%s.%s (%s) could hold a credential", at, f.Name, f.Tag)
			}
			walk(f.Type, at+"."+f.Name)
		}
	}
	walk(reflect.TypeOf(Record{}), "Record")
}

func TestCodeIsKeptOnlyWhenAskedAndClipped(t *testing.T) {
	code := strings.Repeat("x", 5000)
	l, path := openTest(t, Options{})
	r := Record{Action: "a"}
	r.SetCode(code)
	l.Write(r)
	got := readAll(t, path)[0]
	if got.Code != "" || got.CodeBytes != 5000 || len(got.CodeSHA256) != 64 {
		t.Errorf("hash mode: %+v", got)
	}
	l, path = openTest(t, Options{FullCode: true, MaxCodeBytes: 1000})
	l.Write(r)
	got = readAll(t, path)[0]
	if len(got.Code) != 1000 || !got.CodeClipped || got.CodeBytes != 5000 {
		t.Errorf("full mode: code %d bytes clipped %v size %d", len(got.Code), got.CodeClipped, got.CodeBytes)
	}
	var e Record
	e.SetArgv([]string{"ls", "-l"})
	sum := sha256.Sum256([]byte(`["ls","-l"]`))
	if e.CodeSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("argv digest %s", e.CodeSHA256)
	}
}

func TestHostileFieldsAreBounded(t *testing.T) {
	l, path := openTest(t, Options{FullCode: true, MaxCodeBytes: MaxCodeBytesLimit})
	huge := strings.Repeat("\x01", 3<<20)
	list := make([]string, 10000)
	for i := range list {
		list[i] = huge[:1000]
	}
	names := make([]EgressName, 10000)
	r := Record{Action: huge, Tenant: huge, Peer: huge, Sandbox: huge, Path: huge, Reason: huge, Error: huge,
		Policy: &PolicyChange{OldAllow: list, NewAllow: list}, Egress: &Egress{Names: names}}
	r.SetCode(huge)
	if err := l.Write(r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) > MaxLineBytes || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("a hostile record made %d bytes", len(b))
	}
	got := readAll(t, path)[0]
	if len(got.Tenant) != maxID || len(got.Policy.NewAllow) != maxList || len(got.Egress.Names) != maxList || got.CodeBytes != 3<<20 {
		t.Errorf("bounds: tenant %d allow %d names %d code_bytes %d", len(got.Tenant), len(got.Policy.NewAllow), len(got.Egress.Names), got.CodeBytes)
	}
	if len(r.Policy.NewAllow) != 10000 {
		t.Error("Write changed the caller's record")
	}
}

func TestConcurrentWritersMakeWholeLines(t *testing.T) {
	l, path := openTest(t, Options{MaxBytes: 64 << 10, Keep: 1000, FullCode: true})
	const writers, each = 8, 300
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r := Record{Action: "exec", Sandbox: fmt.Sprintf("w%d-%d", w, i)}
				r.SetCode(strings.Repeat("y", (w*977+i*131)%3000))
				if err := l.Write(r); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(Files(path)); n < 10 {
		t.Errorf("only %d files: the test did not rotate much", n)
	}
	seen := map[string]bool{}
	for _, r := range readAll(t, path) { // readAll fails on any bad line
		if seen[r.Sandbox] {
			t.Errorf("%s twice", r.Sandbox)
		}
		seen[r.Sandbox] = true
		if len(r.Code) != int(r.CodeBytes) {
			t.Errorf("%s: code %d bytes of %d", r.Sandbox, len(r.Code), r.CodeBytes)
		}
	}
	if len(seen) != writers*each {
		t.Errorf("%d records, want %d", len(seen), writers*each)
	}
}

func TestRotationKeepsNFiles(t *testing.T) {
	l, path := openTest(t, Options{MaxBytes: 4096, Keep: 3})
	for i := 0; i < 300; i++ {
		if err := l.Write(Record{Action: "x", Sandbox: fmt.Sprintf("sb-%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	files := Files(path)
	want := []string{path + ".3", path + ".2", path + ".1", path}
	if !reflect.DeepEqual(files, want) {
		t.Fatalf("files %v, want %v", files, want)
	}
	if _, err := os.Stat(path + ".4"); err == nil {
		t.Error("a fourth rotated file is kept")
	}
	if _, err := os.Stat(path + ".new"); err == nil {
		t.Error("the rotation's temporary file is left")
	}
	for _, p := range files {
		fi, _ := os.Stat(p)
		if fi.Size() > 4096 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v", p, fi.Size(), fi.Mode().Perm())
		}
	}
	// The files hold the newest records, in order, with no gap.
	recs := readAll(t, path)
	if len(recs) < 40 || recs[len(recs)-1].Sandbox != "sb-0299" {
		t.Fatalf("%d records, last %+v", len(recs), recs[len(recs)-1])
	}
	for i := 1; i < len(recs); i++ {
		var a, b int
		fmt.Sscanf(recs[i-1].Sandbox, "sb-%d", &a)
		fmt.Sscanf(recs[i].Sandbox, "sb-%d", &b)
		if b != a+1 {
			t.Fatalf("gap between %s and %s", recs[i-1].Sandbox, recs[i].Sandbox)
		}
	}
	// Reopening appends to the existing file.
	l.Close()
	l2, err := Open(path, Options{MaxBytes: 4096, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	l2.Write(Record{Action: "x", Sandbox: "sb-after"})
	recs = readAll(t, path)
	if recs[len(recs)-1].Sandbox != "sb-after" || recs[len(recs)-2].Sandbox != "sb-0299" {
		t.Error("a reopened log does not append")
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	l, _ := openTest(t, Options{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := l.Write(Record{Action: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		path string
		opt  Options
	}{
		{"", Options{}},
		{filepath.Join(dir, "a"), Options{MaxBytes: 100}},
		{filepath.Join(dir, "a"), Options{Keep: -1}},
		{filepath.Join(dir, "a"), Options{MaxCodeBytes: MaxCodeBytesLimit + 1}},
		{dir, Options{}}, // a directory
	} {
		if l, err := Open(c.path, c.opt); err == nil {
			l.Close()
			t.Errorf("Open(%q, %+v) succeeded", c.path, c.opt)
		}
	}
}
