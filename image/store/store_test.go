package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

func TestValidNameIsTheContractsLessDefault(t *testing.T) {
	for _, name := range []string{"team", "a", "x-1_2.3", strings.Repeat("a", sandbox.MaxWorkspaceName),
		"default", "", "-a", "A", "a/b", "..", ".a", "a b", strings.Repeat("a", sandbox.MaxWorkspaceName+1)} {
		want := sandbox.ValidImageName(name) && name != "default"
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v (the contract says %v)", name, got, want, sandbox.ValidImageName(name))
		}
	}
}

func TestNamesPathsAndRemove(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	mk := func(name string, image bool) {
		if err := os.MkdirAll(s.ImageDir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if image {
			if err := os.WriteFile(filepath.Join(s.ImageDir(name), ImageFile), []byte("img"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("team", true)
	mk("alpha", true)
	mk("empty", false)   // no image file: not an image
	mk("default", true)  // the daemon's own name: never the store's
	mk("Bad Name", true) // not a name
	if got, want := s.Names(), []string{"alpha", "team"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %q, want %q", got, want)
	}
	if p, ok := s.ImagePath("team"); !ok || p != filepath.Join(s.Dir, "team", ImageFile) {
		t.Errorf("ImagePath(team) = %q, %v", p, ok)
	}
	for _, name := range []string{"empty", "default", "../team", "nope"} {
		if _, ok := s.ImagePath(name); ok {
			t.Errorf("ImagePath(%q) found an image", name)
		}
	}
	if err := s.Remove("team", "1"); err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !reflect.DeepEqual(got, []string{"alpha"}) {
		t.Errorf("after Remove: Names() = %q", got)
	}
	if ents, _ := os.ReadDir(s.Dir); len(ents) != 4 {
		t.Errorf("Remove left %d entries (want alpha, empty, default, Bad Name): %v", len(ents), ents)
	}
	if err := s.Remove("team", "2"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove of a missing image: %v, want fs.ErrNotExist", err)
	}
	if err := s.Remove("../alpha", "3"); err == nil {
		t.Error("Remove took a path for a name")
	}
}

func TestFSUUIDRefusesWhatIsNotExt4(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FSUUID(p); err == nil || !strings.Contains(err.Error(), "not an ext4") {
		t.Errorf("FSUUID of zeroes: %v", err)
	}
	if err := os.WriteFile(p, []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FSUUID(p); err == nil {
		t.Error("FSUUID of a short file succeeded")
	}
}
