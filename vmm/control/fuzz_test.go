package control

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadSpec feeds the spec's readers (the VMM's strict decode and
// Validate, the daemon's ReadSpec) and ReadEnd, the daemon's reader of a
// VMM's last word, arbitrary files: none panics. (Load itself is left
// out: it takes over the descriptors a spec names, which in this process
// are the fuzzer's own.)
func FuzzLoadSpec(f *testing.F) {
	f.Add([]byte(`{"kernel":"/k","vcpus":1,"memory_mib":128}`))
	f.Add([]byte(`{"kernel":"/k","vcpus":1,"memory_mib":128,"vsock":{"cid":3,"uds":"/v"},"net":{"mac":"02:00:00:00:00:01"},"files":{"tap":3}}`))
	f.Add([]byte(`{"restore":{},"vcpus":2,"memory_mib":512,"files":{"restore.state":3,"restore.memory":4}}`))
	f.Add([]byte(`{"reason":"triple_fault","error":"x"}`))
	f.Add([]byte(`{"kernel":"/k","vcpus":-1,"memory_mib":1e99,"disks":[{"path":"","passed":true}],"log_level":"loud"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "spec.json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var s Spec
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if d.Decode(&s) == nil && s.Validate() == nil {
			if _, err := s.Level(); err != nil {
				t.Fatalf("a valid spec's log level %q: %v", s.LogLevel, err)
			}
		}
		ReadSpec(p)
		ReadEnd(p)
	})
}
