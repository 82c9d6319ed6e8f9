package imagecfg

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/cellvm/cellvm/guestinit/celluser"
	"github.com/cellvm/cellvm/image/buildplan"
)

func TestParse(t *testing.T) {
	c, err := Parse([]byte(`{"env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"], "working_dir": "/app/../srv//x/", "user": "app:staff"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := buildplan.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv/x", User: "app:staff"}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Parse = %+v, want %+v", c, want)
	}
	if c, err := Parse([]byte(`{}`)); err != nil || !reflect.DeepEqual(c, buildplan.Config{}) {
		t.Errorf("empty config: %+v, %v", c, err)
	}
	for name, in := range map[string]string{
		"unknown field":   `{"env": [], "cmd": ["sh"]}`,
		"two values":      `{} {}`,
		"trailing junk":   `{}x`,
		"not an object":   `["PATH=/bin"]`,
		"bad env key":     `{"env": ["1PATH=/bin"]}`,
		"env without =":   `{"env": ["PATH"]}`,
		"env newline":     `{"env": ["A=b\nc"]}`,
		"relative dir":    `{"working_dir": "app"}`,
		"dir with NUL":    `{"working_dir": "/a\u0000b"}`,
		"long dir":        `{"working_dir": "/` + strings.Repeat("a", 1100) + `"}`,
		"bad user":        `{"user": "a b"}`,
		"user with colon": `{"user": "a:b:c"}`,
		"wrong type":      `{"user": 0}`,
		"too many env":    `{"env": [` + strings.Repeat(`"A=1",`, 256) + `"A=1"]}`,
	} {
		if _, err := Parse([]byte(in)); err == nil {
			t.Errorf("%s: %s was taken", name, clip(in))
		}
	}
}

func TestLoad(t *testing.T) {
	root := t.TempDir()
	if c, err := Load(root); err != nil || !reflect.DeepEqual(c, buildplan.Config{}) {
		t.Errorf("no file: %+v, %v; want the zero config", c, err)
	}
	file := filepath.Join(root, buildplan.ImageConfigFile)
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.WriteFile(file, []byte(`{"working_dir": "/app"}`), 0o644)
	if c, err := Load(root); err != nil || c.WorkingDir != "/app" {
		t.Errorf("Load = %+v, %v", c, err)
	}
	os.WriteFile(file, []byte(`{"working_dir": "/app", "x": 1}`), 0o644)
	if _, err := Load(root); err == nil || !strings.Contains(err.Error(), buildplan.ImageConfigFile) {
		t.Errorf("a bad file: %v", err)
	}
	os.WriteFile(file, []byte(`{"env": ["A=`+strings.Repeat("x", MaxFileBytes)+`"]}`), 0o644)
	if _, err := Load(root); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("a file over the bound: %v", err)
	}
	os.Remove(file)
	os.Mkdir(file, 0o755)
	if _, err := Load(root); err == nil {
		t.Error("a directory was taken as the config")
	}
}

// fakeRoot is an image root with the given passwd and group.
func fakeRoot(t *testing.T, passwd, group string) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	if passwd != "" {
		os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644)
	}
	if group != "" {
		os.WriteFile(filepath.Join(root, "etc/group"), []byte(group), 0o644)
	}
	return root
}

const (
	testPasswd = "root:x:0:0:root:/root:/bin/sh\n# comment\n+nis\nbroken line\napp:x:1001:1002:App:/home/app:/bin/sh\nweird:x:1003:zz::relative:/bin/sh\nnogroup:x:1004:0::/h:/bin/sh\n"
	testGroup  = "root:x:0:\nstaff:x:50:\napp:x:1002:\nbad:x:nope:\n"
)

func TestLookupUser(t *testing.T) {
	root := fakeRoot(t, testPasswd, testGroup)
	for spec, want := range map[string]User{
		"app":           {Name: "app", UID: 1001, GID: 1002, Home: "/home/app"},
		"1001":          {Name: "app", UID: 1001, GID: 1002, Home: "/home/app"},
		"app:staff":     {Name: "app", UID: 1001, GID: 50, Home: "/home/app"},
		"app:77":        {Name: "app", UID: 1001, GID: 77, Home: "/home/app"},
		"4242":          {UID: 4242, GID: 4242},
		"4242:staff":    {UID: 4242, GID: 50},
		"weird":         {Name: "weird", UID: 1003, GID: 1003}, // bad gid: the uid; relative home: none
		"root":          {Name: "root", UID: 0, GID: 0, Home: "/root"},
		"0":             {Name: "root", UID: 0, GID: 0, Home: "/root"},
		"nogroup:staff": {Name: "nogroup", UID: 1004, GID: 50, Home: "/h"},
	} {
		got, err := LookupUser(root, spec)
		if err != nil || got != want {
			t.Errorf("LookupUser(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for spec, why := range map[string]string{
		"nobody":       "not in the image's /etc/passwd",
		"app:nogroup":  "not in the image's /etc/group",
		"app:bad":      "bad gid",
		"nogroup":      "group 0",
		"4242:0":       "group 0",
		"app:":         "empty",
		"99999999999":  "not in the image's /etc/passwd", // past any uid: a name, and no such name
		"+nis":         "not in the image's /etc/passwd",
		"broken line":  "not in the image's /etc/passwd",
		"4242:nogroup": "not in the image's /etc/group",
	} {
		if u, err := LookupUser(root, spec); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("LookupUser(%q) = %+v, %v; want an error with %q", spec, u, err, why)
		}
	}
	if _, err := LookupUser(root, "nogroup"); !errors.Is(err, ErrRootGroup) {
		t.Errorf("a user in group 0: %v, want ErrRootGroup", err)
	}
	// An image without passwd and group: numeric ids only.
	empty := t.TempDir()
	if u, err := LookupUser(empty, "1001:1001"); err != nil || u != (User{UID: 1001, GID: 1001}) {
		t.Errorf("ids without passwd: %+v, %v", u, err)
	}
	if _, err := LookupUser(empty, "app"); err == nil {
		t.Error("a name without passwd resolved")
	}
}

func TestEnvMergeOrder(t *testing.T) {
	defaults := []string{"PATH=/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "USER=root", "KEEP=1", "junk"}

	// The image's env over the defaults, the identity over both.
	got := Env(defaults, []string{"PATH=/opt/py/bin:/usr/bin", "NEW=x", "KEEP=2", "HOME=/image"}, Identity{Name: "cell", Home: "/home/cell"})
	want := []string{"PATH=/opt/py/bin:/usr/bin", "HOME=/home/cell", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "USER=cell", "KEEP=2", "NEW=x", "LOGNAME=cell"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Env =\n%q\nwant\n%q", got, want)
	}

	// The image's own user keeps the image's HOME, as Docker does.
	got = Env(defaults, []string{"HOME=/image"}, Identity{Name: "app", Home: "/home/app", ImageHomeWins: true})
	if v, _ := Lookup(got, "HOME"); v != "/image" {
		t.Errorf("image user's HOME = %q, want the image's /image", v)
	}
	got = Env(defaults, nil, Identity{Name: "app", Home: "/home/app", ImageHomeWins: true})
	if v, _ := Lookup(got, "HOME"); v != "/home/app" {
		t.Errorf("image user's HOME without the image's = %q", v)
	}

	// An image's locale replaces all of the defaults' (a default LC_ALL
	// would override its LANG).
	got = Env(defaults, []string{"LANG=de_DE.UTF-8"}, Identity{})
	if _, ok := Lookup(got, "LC_ALL"); ok {
		t.Errorf("LC_ALL kept over the image's LANG: %q", got)
	}
	if v, _ := Lookup(got, "LANG"); v != "de_DE.UTF-8" {
		t.Errorf("LANG = %q", v)
	}
	// Without an image, the defaults as they are (no identity: USER kept).
	got = Env(defaults, nil, Identity{})
	if !reflect.DeepEqual(got, defaults[:len(defaults)-1]) {
		t.Errorf("defaults alone: %q", got)
	}
}

func TestDecide(t *testing.T) {
	root := fakeRoot(t, testPasswd, testGroup)
	o := Options{Root: root, Defaults: []string{"PATH=/usr/bin", "HOME=/root", "USER=root"}, Workspace: "/workspace"}
	cellUser := func(c Cells) bool {
		return !c.AsRoot && !c.ImageUser && c.UID == celluser.UID && c.GID == celluser.GID && c.Home == celluser.Home
	}

	c := Decide(o, buildplan.Config{})
	if !cellUser(c) || c.Dir != "/workspace" || len(c.Notes) != 0 {
		t.Errorf("no config: %+v", c)
	}
	if v, _ := Lookup(c.Env, "HOME"); v != celluser.Home {
		t.Errorf("cell user's HOME = %q", v)
	}
	if _, ok := Lookup(c.Env, "MPLCONFIGDIR"); ok {
		t.Error("MPLCONFIGDIR set in an image without cellvm's matplotlib cache")
	}
	for _, u := range []string{"root", "0", "0:0", "root:staff"} {
		if c := Decide(o, buildplan.Config{User: u}); !cellUser(c) || len(c.Notes) != 0 {
			t.Errorf("user %q: %+v; want cellvm's cell user", u, c)
		}
	}
	c = Decide(o, buildplan.Config{User: "app", WorkingDir: "/app", Env: []string{"PATH=/venv/bin:/usr/bin"}})
	if c.AsRoot || !c.ImageUser || c.UID != 1001 || c.GID != 1002 || c.Name != "app" || c.Home != "/home/app" || c.Dir != "/app" {
		t.Errorf("image user: %+v", c)
	}
	if v, _ := Lookup(c.Env, "PATH"); v != "/venv/bin:/usr/bin" {
		t.Errorf("PATH = %q", v)
	}
	if v, _ := Lookup(c.Env, "USER"); v != "app" {
		t.Errorf("USER = %q", v)
	}
	c = Decide(o, buildplan.Config{User: "4242"})
	if !c.ImageUser || c.UID != 4242 || c.Name != "4242" || c.Home != "/home/4242" {
		t.Errorf("a uid without an entry: %+v", c)
	}
	for _, u := range []string{"nobody", "nogroup", "app:nogroup"} {
		c = Decide(o, buildplan.Config{User: u})
		if !cellUser(c) || len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "cells run as cellvm's user \"user\"") {
			t.Errorf("unusable user %q: %+v", u, c)
		}
	}
	o.AsRoot = true
	c = Decide(o, buildplan.Config{User: "app", WorkingDir: "/app"})
	if !c.AsRoot || c.Dir != "/app" {
		t.Errorf("root option: %+v", c)
	}
	if v, _ := Lookup(c.Env, "USER"); v != "root" {
		t.Errorf("root option USER = %q", v)
	}

	o.AsRoot = false
	os.MkdirAll(filepath.Join(root, matplotlibCache), 0o755)
	if c := Decide(o, buildplan.Config{}); !contains(c.Env, "MPLCONFIGDIR="+matplotlibCache) {
		t.Errorf("cellvm's own image: no MPLCONFIGDIR in %q", c.Env)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func owner(t *testing.T, p string) (uid, gid int) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid)
}

func TestPrepare(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	root := fakeRoot(t, testPasswd, testGroup)
	os.MkdirAll(filepath.Join(root, "workspace"), 0o755)
	o := Options{Root: root, Workspace: "/workspace"}

	// A missing working dir is made, owned by the cell user.
	c := Decide(o, buildplan.Config{WorkingDir: "/srv/app"})
	c.Prepare(root, "/workspace")
	if u, g := owner(t, filepath.Join(root, "srv/app")); c.Dir != "/srv/app" || u != celluser.UID || g != celluser.GID || len(c.Notes) != 0 {
		t.Errorf("made working dir: %d:%d, %+v", u, g, c)
	}
	if u, _ := owner(t, filepath.Join(root, "srv")); u != 0 {
		t.Errorf("the parent went to %d", u)
	}
	// An existing root-owned one the image's root could write: handed
	// over (the directory, not what is in it).
	os.MkdirAll(filepath.Join(root, "code/sub"), 0o755)
	c = Decide(o, buildplan.Config{WorkingDir: "/code"})
	c.Prepare(root, "/workspace")
	if u, _ := owner(t, filepath.Join(root, "code")); u != celluser.UID {
		t.Errorf("/code not handed over: %d", u)
	}
	if u, _ := owner(t, filepath.Join(root, "code/sub")); u != 0 {
		t.Errorf("/code/sub handed over too: %d", u)
	}
	// A system directory never is.
	os.MkdirAll(filepath.Join(root, "usr/local"), 0o755)
	c = Decide(o, buildplan.Config{WorkingDir: "/usr/local"})
	c.Prepare(root, "/workspace")
	if u, _ := owner(t, filepath.Join(root, "usr/local")); u != 0 || c.Dir != "/usr/local" {
		t.Errorf("/usr/local: owner %d, dir %s", u, c.Dir)
	}
	// A file in its place: the cells start in the workspace.
	os.WriteFile(filepath.Join(root, "afile"), nil, 0o644)
	c = Decide(o, buildplan.Config{WorkingDir: "/afile"})
	c.Prepare(root, "/workspace")
	if c.Dir != "/workspace" || len(c.Notes) != 1 {
		t.Errorf("a file as working dir: %+v", c)
	}

	// The image's own user: its home is made, /workspace and a new
	// working dir are its.
	c = Decide(o, buildplan.Config{User: "app", WorkingDir: "/app"})
	c.Prepare(root, "/workspace")
	for _, d := range []string{"home/app", "workspace", "app"} {
		if u, g := owner(t, filepath.Join(root, d)); u != 1001 || g != 1002 {
			t.Errorf("%s owned by %d:%d, want 1001:1002", d, u, g)
		}
	}
	if len(c.Notes) != 0 {
		t.Errorf("notes: %q", c.Notes)
	}
	// An existing working dir of the image's is left to the image's user
	// as the image made it.
	os.MkdirAll(filepath.Join(root, "opt/app"), 0o755)
	c = Decide(o, buildplan.Config{User: "app", WorkingDir: "/opt/app"})
	c.Prepare(root, "/workspace")
	if u, _ := owner(t, filepath.Join(root, "opt/app")); u != 0 {
		t.Errorf("the image user's existing working dir changed owner: %d", u)
	}
}

// TestPrepareFollowsLinksToSystemDirs: a working directory that is a link
// (or under one) to a system directory is not handed over.
func TestPrepareFollowsLinksToSystemDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	root := fakeRoot(t, testPasswd, testGroup)
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.MkdirAll(filepath.Join(root, "opt/real"), 0o755)
	os.Symlink("usr", filepath.Join(root, "app"))
	os.Symlink("opt/real", filepath.Join(root, "code"))
	o := Options{Root: root, Workspace: "/workspace"}
	c := Decide(o, buildplan.Config{WorkingDir: "/app/bin"})
	c.Prepare(root, "/workspace")
	if u, _ := owner(t, filepath.Join(root, "usr/bin")); u != 0 {
		t.Errorf("/usr/bin handed over through the /app link: %d", u)
	}
	c = Decide(o, buildplan.Config{WorkingDir: "/code"})
	c.Prepare(root, "/workspace")
	if u, _ := owner(t, filepath.Join(root, "opt/real")); u != celluser.UID {
		t.Errorf("/code -> /opt/real not handed over: %d", u)
	}
}
